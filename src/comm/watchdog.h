// CollectiveWatchdog: turns a hang into an error. A device collective (NCCL) runs on the GPU; when a
// peer rank dies or is stuck in a different collective, the kernel waits forever and so does every
// host thread that later synchronizes with it. The watchdog keeps the collectives this rank posted
// (sequence number, name, when, a "done?" probe) and, on its own thread, checks them every
// `poll_s`: when the backend reports an asynchronous error, or the oldest collective is still not
// done `timeout_s` after it was started, it reports once with a message that names this rank, the
// collective and its sequence number (ranks stuck at different numbers were out of step; the rank
// that printed nothing is the dead one), then ends the job.
//
// A collective is watched from the moment its call starts (begin), not from when the call returns
// (posted): the posting call itself can block for good — NCCL connects to peers lazily inside the
// first collective, and the first launch of a kernel may wait for the whole device.
//
// Ending the job must not depend on anything that can hang: after on_failure, each abort step (the
// NCCL communicator's: abort NCCL, then MPI_Abort) runs on a thread of its own and is given
// `abort_grace_s`; one that has not returned by then is abandoned, and `terminate` (_Exit) ends the
// process last. ncclCommAbort frees device memory, which waits for the device: behind a stuck
// stream it never returns.
//
// The same policy guards MPI collectives (comm/mpi_watch.h): there nothing can tell the watchdog
// that a peer died, so `peers` asks the other ranks, after a timeout, how far they got (which of
// them never arrived at the late collective), and `serve` answers such questions from peers on
// every poll.
//
// A long operation made of many calls, some out of reach (HDF5's MPI-IO inside a checkpoint write,
// comm/mpi_watch.h's WatchedMpiSection), is one entry with a deadline of its own (begin's
// `deadline`); the collectives inside it keep theirs. Each unfinished entry is held to its own.
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
#include <vector>

namespace wmtp {

// The exit status of a process the watchdog ends: "stopped, resume me" (core/error.h), so that
// sbatch/train.sbatch requeues the job and it resumes from its last checkpoint.
constexpr int kWatchdogExitCode = 75;

// One way of ending the job after a failure (e.g. "ncclCommAbort", "MPI_Abort").
struct AbortStep {
  std::string name;
  std::function<void()> run;
};

// Runs the steps in order, each on a detached thread of its own, waiting at most `grace_s` for each;
// a step still running then is abandoned (left blocked) and the next one starts. `note` hears about
// each abandoned step. Returns the names of the abandoned steps.
std::vector<std::string> run_abort_steps(const std::vector<AbortStep>& steps, double grace_s,
                                         const std::function<void(const std::string&)>& note = {});

class CollectiveWatchdog {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic
  struct Options {
    std::string who;  // "rank 3 on node17": names this rank in messages
    std::string backend = "NCCL";
    double timeout_s = 600;  // <= 0: never time out (asynchronous errors are still reported)
    double poll_s = 1.0;
    std::function<std::string()> async_error;            // "" when none (optional)
    std::function<void(const std::string&)> on_failure;  // called once, from the watchdog thread
    std::vector<AbortStep> abort;                        // then these, bounded by abort_grace_s each
    double abort_grace_s = 10;
    std::function<void()> terminate;  // then this (e.g. _Exit), when set
    Clock clock;                      // default: steady_clock
    // After a timeout, what the other ranks say about the late collective (seq, op): appended to
    // the message. Runs on the watchdog thread; must return within a bounded time.
    std::function<std::string(int64_t seq, const std::string& op)> peers;
    std::function<void()> serve;  // every poll, on the watchdog thread (answers peers' questions)
  };
  // How far this rank got: its last collective begun, and its oldest unfinished one (0 = none).
  struct Progress {
    int64_t last = 0, open = 0;
    std::string last_op, open_op;
  };
  explicit CollectiveWatchdog(Options opt);
  ~CollectiveWatchdog();  // stops the thread (does not wait for outstanding collectives)
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // A deadline other than Options::timeout_s, and the setting that chose it (named in the message).
  struct Deadline {
    double timeout_s = 0;  // <= 0: none
    std::string setting;   // e.g. "[runtime] checkpoint_write_timeout_s"
  };
  // A collective's call starts: from now on it counts against the timeout (or `deadline`), even
  // while the call that posts it has not returned. Returns its sequence number.
  int64_t begin(std::string op);
  int64_t begin(std::string op, Deadline deadline);
  // Collective `seq` is posted; `done` says whether it has completed (thread-safe, cheap; `release`
  // runs once when the entry is dropped: e.g. destroys the CUDA event `done` queries). A call that
  // failed before posting anything passes a `done` that returns true.
  void posted(int64_t seq, std::function<bool()> done, std::function<void()> release = {});
  // begin + posted, for a collective posted by a call that has returned.
  int64_t track(std::string op, std::function<bool()> done, std::function<void()> release = {});

  // One round of the policy at time `now`: drops completed collectives (in posting order), and
  // returns the failure message if there is one. Does not call on_failure.
  std::optional<std::string> check(double now);

  // The polling thread: check(clock()) every poll_s; on a failure, on_failure once, the abort steps,
  // then terminate.
  void start();
  void stop();
  size_t outstanding() const;
  Progress progress() const;

 private:
  struct Entry {
    int64_t seq;
    std::string op;
    double started;
    std::function<bool()> done;  // empty while the call that posts it has not returned
    std::function<void()> release;
    std::optional<Deadline> deadline;  // none: Options::timeout_s
  };
  int64_t begin_entry(std::string op, std::optional<Deadline> deadline);
  void loop();

  Options opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> entries_;
  int64_t next_seq_ = 1;
  std::string last_op_;
  int64_t late_seq_ = 0;  // the collective a timeout named
  std::string late_op_;
  bool stopping_ = false;
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

}  // namespace wmtp
