// CollectiveWatchdog: timeout and asynchronous-error policy for device collectives, its thread, and
// the bounded abort sequence that ends the job.
#include "comm/watchdog.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>

namespace wmtp {

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<std::string> run_abort_steps(const std::vector<AbortStep>& steps, double grace_s,
                                         const std::function<void(const std::string&)>& note) {
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool returned = false;
  };
  std::vector<std::string> abandoned;
  for (const AbortStep& step : steps) {
    // The thread owns what it runs and what it signals: an abandoned step may outlive this call.
    auto shared = std::make_shared<Shared>();
    std::thread([shared, run = step.run] {
      if (run) run();
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->returned = true;
      shared->cv.notify_all();
    }).detach();
    std::unique_lock<std::mutex> lock(shared->mu);
    if (!shared->cv.wait_for(lock, std::chrono::duration<double>(grace_s), [&] { return shared->returned; })) {
      abandoned.push_back(step.name);
      if (note) note(step.name);
    }
  }
  return abandoned;
}

CollectiveWatchdog::CollectiveWatchdog(Options opt) : opt_(std::move(opt)) {
  if (!opt_.clock) opt_.clock = steady_seconds;
  if (opt_.poll_s <= 0) opt_.poll_s = 1.0;
}

CollectiveWatchdog::~CollectiveWatchdog() {
  stop();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : entries_)
    if (e.release) e.release();
}

int64_t CollectiveWatchdog::begin(std::string op) { return begin_entry(std::move(op), std::nullopt); }

int64_t CollectiveWatchdog::begin(std::string op, Deadline deadline) {
  return begin_entry(std::move(op), std::move(deadline));
}

int64_t CollectiveWatchdog::begin_entry(std::string op, std::optional<Deadline> deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t seq = next_seq_++;
  last_op_ = op;
  entries_.push_back(Entry{seq, std::move(op), opt_.clock(), {}, {}, std::move(deadline)});
  return seq;
}

void CollectiveWatchdog::posted(int64_t seq, std::function<bool()> done, std::function<void()> release) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->seq != seq) continue;
    it->done = std::move(done);
    it->release = std::move(release);
    return;
  }
  if (release) release();  // not watched (cannot happen: unposted entries are never dropped)
}

int64_t CollectiveWatchdog::track(std::string op, std::function<bool()> done, std::function<void()> release) {
  const int64_t seq = begin(std::move(op));
  posted(seq, std::move(done), std::move(release));
  return seq;
}

std::optional<std::string> CollectiveWatchdog::check(double now) {
  std::lock_guard<std::mutex> lock(mu_);
  // Collectives complete in posting order on one stream: drop the finished prefix.
  while (!entries_.empty() && entries_.front().done && entries_.front().done()) {
    if (entries_.front().release) entries_.front().release();
    entries_.pop_front();
  }
  if (opt_.async_error) {
    std::string err = opt_.async_error();
    if (!err.empty()) {
      std::ostringstream os;
      os << opt_.who << ": " << opt_.backend << " reported an asynchronous error: " << err;
      if (!entries_.empty())
        os << " (oldest unfinished collective: " << entries_.front().op << " #" << entries_.front().seq << ")";
      os << "; a peer rank has probably died or lost its network. Aborting the job.";
      return os.str();
    }
  }
  // The first unfinished entry past its own deadline (a section's collectives run inside it: the
  // section is older, but they may be late first).
  for (const Entry& e : entries_) {
    const double timeout = e.deadline ? e.deadline->timeout_s : opt_.timeout_s;
    const double age = now - e.started;
    if (timeout <= 0 || age <= timeout || (e.done && e.done())) continue;  // done() last: it may query a device
    late_seq_ = e.seq;
    late_op_ = e.op;
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(1);
    os << opt_.backend << " " << e.op << " (collective #" << e.seq << " of " << opt_.who << ") has not completed "
       << age << " s after it was started" << (e.done ? "" : " (the call posting it has not returned)") << " (timeout "
       << timeout << " s, " << (e.deadline ? e.deadline->setting : std::string("[runtime] collective_timeout_s"))
       << "): a peer rank is dead, or stuck in another collective "
          "(compare the collective numbers other ranks print). Aborting the job.";
    return os.str();
  }
  return std::nullopt;
}

void CollectiveWatchdog::start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void CollectiveWatchdog::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

size_t CollectiveWatchdog::outstanding() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

CollectiveWatchdog::Progress CollectiveWatchdog::progress() const {
  std::lock_guard<std::mutex> lock(mu_);
  Progress p;
  p.last = next_seq_ - 1;
  p.last_op = last_op_;
  // The finished prefix is dropped only by check(): the first entry not done is the open one.
  for (const Entry& e : entries_) {
    if (e.done && e.done()) continue;
    p.open = e.seq;
    p.open_op = e.op;
    break;
  }
  return p;
}

void CollectiveWatchdog::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(opt_.poll_s), [this] { return stopping_; });
      if (stopping_) return;
    }
    if (opt_.serve) opt_.serve();
    std::optional<std::string> failure = check(opt_.clock());
    if (failure && !failed_.exchange(true)) {
      int64_t late_seq;
      std::string late_op;
      {
        std::lock_guard<std::mutex> lock(mu_);
        late_seq = late_seq_;
        late_op = late_op_;
      }
      if (opt_.peers && late_seq > 0) *failure += " " + opt_.peers(late_seq, late_op);
      if (opt_.on_failure) opt_.on_failure(*failure);
      else
        fprintf(stderr, "wmtp: error: %s\n", failure->c_str());
      run_abort_steps(opt_.abort, opt_.abort_grace_s, [this](const std::string& step) {
        fprintf(stderr, "wmtp: [%s] %s did not return within %.0f s; going on\n", opt_.who.c_str(), step.c_str(),
                opt_.abort_grace_s);
        fflush(stderr);
      });
      if (opt_.terminate) opt_.terminate();
      return;
    }
  }
}

}  // namespace wmtp
