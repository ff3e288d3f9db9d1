// A bounded FIFO of metric points drained by one background thread into a PointDeliverer, so the
// training loop never waits on a network: push() only takes a mutex. Failed deliveries are retried
// with exponential backoff (transient errors) or dropped (the receiver refused them); the first
// failure of each kind is one warning, and finish() reports what was not delivered. When the queue
// is full, newer points are dropped and counted. Points are delivered in the order pushed. A stop
// signal (DeliveryOptions::stop_requested) cuts finish()'s wait to kStopGraceSec: a job being
// preempted or cancelled must leave, and metrics.jsonl holds every point for bin/track-sync.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "track/metrics_sink.h"
#include "track/mlflow_store.h"

namespace wmtp {

class PointDeliverer {
 public:
  virtual ~PointDeliverer() = default;
  // Each throws MlflowError (transient: retried later) or any std::exception (a refusal).
  virtual void deliver(const std::vector<MlflowMetric>& batch) = 0;
  virtual void close(RunEnd end) = 0;
  // A flag set when the queue gives up: a call waiting on the network must return soon after.
  virtual void bind_cancel(const std::atomic<bool>* cancel) = 0;
};

// What is left of finish()'s wait once a stop signal is seen: enough for a healthy server to take
// the last points and the run's status, never the full timeout.
constexpr double kStopGraceSec = 1.0;

struct DeliveryOptions {
  size_t capacity = 200000;  // points held at most (about 100 bytes each)
  size_t batch = 1000;       // points per deliver() call
  double first_backoff_sec = 1.0, max_backoff_sec = 60.0;
  std::function<bool()> stop_requested;  // polled during finish(); async-signal state only (cheap, lock-free)
  std::string kept_note;  // where every point is kept (points_kept_note), said in the warnings; "": nowhere
};

class DeliveryQueue {
 public:
  // `what` names the receiver in messages ("MLflow http://host:5000").
  DeliveryQueue(std::unique_ptr<PointDeliverer> deliverer, std::string what, Logger log, DeliveryOptions opt = {});
  ~DeliveryQueue();  // finish(RunEnd::Failed, 0) when finish() was not called
  DeliveryQueue(const DeliveryQueue&) = delete;
  DeliveryQueue& operator=(const DeliveryQueue&) = delete;

  void push(std::vector<MlflowMetric> points);

  struct Summary {
    size_t delivered = 0, undelivered = 0, dropped = 0;  // dropped: refused, or the queue was full
    bool closed = false;                                 // the deliverer's close() succeeded
    bool stopped = false;                                // a stop signal cut the wait short
  };
  // Lets the thread deliver what is queued and close for at most `deadline_sec` (at most
  // kStopGraceSec after a stop signal is seen), then cancels it; warns once when points were not
  // delivered. Idempotent (later calls return the same summary).
  Summary finish(RunEnd end, double deadline_sec);

 private:
  void run();
  bool backoff(double seconds);  // false when cancelled
  void note_failure(const std::exception& e, bool transient);

  std::unique_ptr<PointDeliverer> deliverer_;
  std::string what_;
  Logger log_;
  DeliveryOptions opt_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<MlflowMetric> queue_;
  bool finishing_ = false, kick_ = false, done_ = false, finished_ = false;
  RunEnd end_ = RunEnd::Failed;
  std::atomic<bool> cancel_{false};
  Summary summary_;  // counters updated by the thread under mu_
  bool warned_transient_ = false, warned_refused_ = false, failing_ = false;
  std::thread thread_;
};

}  // namespace wmtp
