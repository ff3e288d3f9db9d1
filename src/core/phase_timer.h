// PhaseTimer: where the time of a training step goes, phase by phase, without adding a host sync to
// the step. The trainer owns one; the model's step, the sharding engine and the optimizer mark their
// phases through a PhaseScope on a pointer that may be null (then nothing is timed).
//
// Two clocks:
//   - device (default): on a GPU a pair of CUDA events recorded on the calling thread's current
//     stream — the interval is the stream time between the two points, i.e. the GPU time the work
//     queued in between took, stalls included; on the CPU the wall clock. Nothing waits for the
//     events until take(), which the trainer calls once per log interval.
//   - host: the wall clock, on every device (host syncs: how long the host was blocked).
// Phases may nest (a gather wait inside a forward) and may be entered from the autograd thread (the
// engine's reduce-scatter waits); a phase's total is the sum of its intervals.
//
// While a LibTorch profiler is recording (train/step_profiler.h), each interval is also a
// user-scope range named after its phase, so traces show the same phases.
#pragma once
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace wmtp {

enum class PhaseClock { Device, Host };

struct PhaseTotal {
  std::string name;
  double seconds = 0;  // sum of the phase's intervals since the last take()
  int64_t count = 0;   // intervals ended since the last take()
};

class PhaseTimer {
 public:
  // `phases`: every name a scope will use, in the order take() reports them (the same on every
  // rank, so totals can be reduced element by element). A name not listed is a programming error.
  PhaseTimer(std::vector<std::string> phases, c10::Device device);
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  // An interval of `phase` starts now (device clock: at this point of the current stream). Returns
  // a token for end(), or -1 while paused.
  int begin(const std::string& phase, PhaseClock clock = PhaseClock::Device);
  void end(int token);

  // Totals since the last take(), in the order given at construction; then starts afresh. Waits for
  // the device's recorded events (a host sync on a GPU): call it at the log interval only.
  std::vector<PhaseTotal> take();

  // While paused (validation, checkpoints) begin() records nothing.
  void set_paused(bool paused);
  c10::Device device() const { return device_; }

 private:
  struct Open;
  struct Pending;
  int index_of(const std::string& phase) const;
  void fold_finished(bool wait);  // CUDA: adds finished event pairs to the totals

  std::vector<std::string> names_;
  c10::Device device_;
  mutable std::mutex mu_;
  bool paused_ = false;
  std::vector<double> seconds_;
  std::vector<int64_t> counts_;
  std::vector<std::unique_ptr<Open>> open_;  // by token; null = free slot
  std::vector<Pending> pending_;             // CUDA event pairs not yet read
  std::vector<void*> event_pool_;            // CUDA events ready for reuse
};

// Times its own lifetime as one interval of `phase` on `timer` (nothing when `timer` is null).
class PhaseScope {
 public:
  PhaseScope(PhaseTimer* timer, const std::string& phase, PhaseClock clock = PhaseClock::Device)
      : timer_(timer), token_(timer ? timer->begin(phase, clock) : -1) {}
  ~PhaseScope() {
    if (timer_ && token_ >= 0) timer_->end(token_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimer* timer_;
  int token_;
};

}  // namespace wmtp
