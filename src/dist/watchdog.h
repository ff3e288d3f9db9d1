// CollectiveWatchdog: turns a hang into an error. A device collective (NCCL) runs on the GPU; when a
// peer rank dies or is stuck in a different collective, the kernel waits forever and so does every
// host thread that later synchronises with it. The watchdog keeps the collectives this rank posted
// (sequence number, name, when, a "done?" probe) and, on its own thread, checks them every
// `poll_s`: when the backend reports an asynchronous error, or the oldest collective is still not
// done `timeout_s` after it was posted, it calls `on_failure` once with a message that names this
// rank, the collective and its sequence number (ranks stuck at different numbers were out of step;
// the rank that printed nothing is the dead one). The NCCL communicator's `on_failure` aborts the
// NCCL communicator (so the kernels return) and then the MPI job.
//
// The policy (check) is separate from the thread so tests can drive it with their own clock.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace wmtp {

class CollectiveWatchdog {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic
  struct Options {
    std::string who;             // "rank 3 on node17": names this rank in messages
    std::string backend = "NCCL";
    double timeout_s = 600;      // <= 0: never time out (asynchronous errors are still reported)
    double poll_s = 1.0;
    std::function<std::string()> async_error;            // "" when none (optional)
    std::function<void(const std::string&)> on_failure;  // called once, from the watchdog thread
    Clock clock;                                         // default: steady_clock
  };
  explicit CollectiveWatchdog(Options opt);
  ~CollectiveWatchdog();  // stops the thread (does not wait for outstanding collectives)
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // A collective was just posted; `done` says whether it has completed (thread-safe, cheap;
  // `release` runs once when the entry is dropped: e.g. destroys the CUDA event `done` queries).
  int64_t track(std::string op, std::function<bool()> done, std::function<void()> release = {});

  // One round of the policy at time `now`: drops completed collectives (in posting order), and
  // returns the failure message if there is one. Does not call on_failure.
  std::optional<std::string> check(double now);

  void start();  // the polling thread: check(clock()) every poll_s; on a failure, on_failure once
  void stop();
  size_t outstanding() const;

 private:
  struct Entry {
    int64_t seq;
    std::string op;
    double posted;
    std::function<bool()> done;
    std::function<void()> release;
  };
  void loop();

  Options opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> entries_;
  int64_t next_seq_ = 1;
  bool stopping_ = false;
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

}  // namespace wmtp
