// DeliveryQueue: the background thread, its retries and its warnings (see delivery_queue.h).
#include "track/delivery_queue.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>

namespace wmtp {

DeliveryQueue::DeliveryQueue(std::unique_ptr<PointDeliverer> deliverer, std::string what, Logger log,
                             DeliveryOptions opt)
    : deliverer_(std::move(deliverer)), what_(std::move(what)), log_(std::move(log)), opt_(opt) {
  deliverer_->bind_cancel(&cancel_);
  thread_ = std::thread([this] { run(); });
}

DeliveryQueue::~DeliveryQueue() { finish(RunEnd::Failed, 0.0); }

void DeliveryQueue::push(std::vector<MlflowMetric> points) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finishing_) return;
    for (MlflowMetric& p : points) {
      if (queue_.size() >= opt_.capacity) {
        summary_.dropped += 1;
        continue;
      }
      queue_.push_back(std::move(p));
    }
  }
  cv_.notify_all();
}

bool DeliveryQueue::backoff(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finishing_) seconds = std::min(seconds, 0.5);  // the deadline bounds the end: retry often within it
  cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return cancel_.load() || kick_; });
  kick_ = false;  // finish() wakes a waiting thread once, for one prompt last try
  return !cancel_.load();
}

void DeliveryQueue::note_failure(const std::exception& e, bool transient) {
  failing_ = true;
  if (transient && !warned_transient_) {
    warned_transient_ = true;
    log_.warn("%s: %s; retrying in the background (the run does not wait%s)", what_.c_str(), e.what(),
              opt_.kept_note.empty() ? "" : ("; " + opt_.kept_note).c_str());
  } else if (!transient && !warned_refused_) {
    warned_refused_ = true;
    log_.warn("%s: %s; points are dropped%s", what_.c_str(), e.what(),
              opt_.kept_note.empty() ? "" : (" (" + opt_.kept_note + ")").c_str());
  }
}

void DeliveryQueue::run() {
  sigset_t all;  // signals (SIGTERM/SIGUSR1 stop requests) belong to the training thread
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  std::vector<MlflowMetric> batch;
  double wait = opt_.first_backoff_sec;
  bool closing = false;
  while (!cancel_.load()) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || !batch.empty() || finishing_ || cancel_.load(); });
      if (cancel_.load()) break;
      if (batch.empty()) {
        const size_t n = std::min(opt_.batch, queue_.size());
        batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.begin() + long(n)));
        queue_.erase(queue_.begin(), queue_.begin() + long(n));
      }
      closing = batch.empty() && finishing_;
    }
    try {
      if (closing) {
        deliverer_->close(end_);
        std::lock_guard<std::mutex> lock(mu_);
        summary_.closed = true;
        break;
      }
      deliverer_->deliver(batch);
      std::lock_guard<std::mutex> lock(mu_);
      summary_.delivered += batch.size();
      batch.clear();
      wait = opt_.first_backoff_sec;
      if (failing_) log_.info("%s: delivering again", what_.c_str());
      failing_ = false;
    } catch (const MlflowError& e) {
      if (cancel_.load()) break;
      if (e.transient()) {
        note_failure(e, true);
        if (!backoff(wait)) break;
        wait = std::min(2 * wait, opt_.max_backoff_sec);
        continue;
      }
      note_failure(e, false);
      if (closing) break;
      std::lock_guard<std::mutex> lock(mu_);
      summary_.dropped += batch.size();
      batch.clear();
    } catch (const std::exception& e) {
      note_failure(e, false);
      if (closing) break;
      std::lock_guard<std::mutex> lock(mu_);
      summary_.dropped += batch.size();
      batch.clear();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  summary_.undelivered = queue_.size() + batch.size();
  done_ = true;
  cv_.notify_all();
}

DeliveryQueue::Summary DeliveryQueue::finish(RunEnd end, double deadline_sec) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (finished_) return summary_;
    finished_ = finishing_ = kick_ = true;
    end_ = end;
    cv_.notify_all();
    using Clock = std::chrono::steady_clock;
    const auto after = [](double sec) {
      return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sec));
    };
    auto deadline = after(std::max(0.0, deadline_sec));
    bool signalled = false;
    // Polled: a signal handler cannot notify a condition variable.
    while (!done_ && Clock::now() < deadline) {
      if (!signalled && opt_.stop_requested && opt_.stop_requested()) {
        signalled = true;
        deadline = std::min(deadline, after(kStopGraceSec));
      }
      cv_.wait_until(lock, std::min(deadline, after(0.05)));
    }
    if (!done_) {
      summary_.stopped = signalled;
      cancel_.store(true);
      cv_.notify_all();
    }
  }
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (summary_.undelivered + summary_.dropped > 0)
    log_.warn("%s: %zu of %zu points not delivered (%zu dropped%s)%s", what_.c_str(),
              summary_.undelivered + summary_.dropped, summary_.delivered + summary_.undelivered + summary_.dropped,
              summary_.dropped, summary_.stopped ? "; a stop signal ended the wait" : "",
              opt_.kept_note.empty() ? "" : ("; " + opt_.kept_note).c_str());
  return summary_;
}

}  // namespace wmtp
