// CollectiveWatchdog: timeout and asynchronous-error policy for device collectives, and its thread.
#include "dist/watchdog.h"

#include <chrono>
#include <cstdio>
#include <sstream>

namespace wmtp {

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

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

int64_t CollectiveWatchdog::track(std::string op, std::function<bool()> done, std::function<void()> release) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t seq = next_seq_++;
  entries_.push_back(Entry{seq, std::move(op), opt_.clock(), std::move(done), std::move(release)});
  return seq;
}

std::optional<std::string> CollectiveWatchdog::check(double now) {
  std::lock_guard<std::mutex> lock(mu_);
  // Collectives complete in posting order on one stream: drop the finished prefix.
  while (!entries_.empty() && entries_.front().done()) {
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
  if (opt_.timeout_s > 0 && !entries_.empty()) {
    const Entry& e = entries_.front();
    const double age = now - e.posted;
    if (age > opt_.timeout_s) {
      std::ostringstream os;
      os.setf(std::ios::fixed);
      os.precision(1);
      os << opt_.backend << " " << e.op << " (collective #" << e.seq << " of " << opt_.who
         << ") has not completed " << age << " s after it was posted (timeout " << opt_.timeout_s
         << " s, [runtime] collective_timeout_s): a peer rank is dead, or stuck in another collective "
            "(compare the collective numbers other ranks print). Aborting the job.";
      return os.str();
    }
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

void CollectiveWatchdog::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::duration<double>(opt_.poll_s), [this] { return stopping_; });
      if (stopping_) return;
    }
    std::optional<std::string> failure = check(opt_.clock());
    if (failure && !failed_.exchange(true)) {
      if (opt_.on_failure) opt_.on_failure(*failure);
      else fprintf(stderr, "wmtp: error: %s\n", failure->c_str());
      return;
    }
  }
}

}  // namespace wmtp
