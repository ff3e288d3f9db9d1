// PhaseTimer: where the time of a training step goes, phase by phase, without adding a host sync to
// the step. The trainer owns one; the model's step, the sharding engine and the optimizer mark their
// phases through a PhaseScope on a pointer that may be null (then nothing is timed). The phases are
// one list, kStepPhases below: an enum in the code, a name in perf/phase_<name>_ms and in traces.
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
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace wmtp {

enum class PhaseClock { Device, Host };

// The phases of a training step, in the order take() reports them. Top level, in step order: data
// (loading and uploading the micro-batches), prepare (the pipeline's begin_step and the counts'
// all-reduce), trunk_forward, head_<k> (one per output head), trunk_backward (the model's step,
// model/mtp_pass.h), clip, optimizer; step spans them all and the rest of train_step. Nested inside
// them: allgather_wait and reduce_scatter_wait (the engine) and host_sync (host clock: the host
// blocked reading a device value; on the CPU every such read, so its count is comparable).
enum class Phase {
  Data,
  Prepare,
  TrunkForward,
  TrunkBackward,
  Clip,
  Optimizer,
  Head,
  AllgatherWait,
  ReduceScatterWait,
  HostSync,
  Step
};

struct PhaseSpec {
  Phase phase;
  const char* name;  // Head: the prefix of head_0 .. head_<K-1>
  bool top_level;    // part of the step's partition (perf/phase_other_ms is the rest)
};
inline constexpr PhaseSpec kStepPhases[] = {
    {Phase::Data, "data", true},
    {Phase::Prepare, "prepare", true},
    {Phase::TrunkForward, "trunk_forward", true},
    {Phase::TrunkBackward, "trunk_backward", true},
    {Phase::Clip, "clip", true},
    {Phase::Optimizer, "optimizer", true},
    {Phase::Head, "head_", true},
    {Phase::AllgatherWait, "allgather_wait", false},
    {Phase::ReduceScatterWait, "reduce_scatter_wait", false},
    {Phase::HostSync, "host_sync", false},
    {Phase::Step, "step", false},
};

struct PhaseTotal {
  std::string name;
  Phase phase = Phase::Step;
  bool top_level = false;
  double seconds = 0;  // sum of the phase's intervals since the last take()
  int64_t count = 0;   // intervals ended since the last take()
};

class PhaseTimer {
 public:
  // The phases of kStepPhases for a model with `heads` output heads, in that order (the same on
  // every rank, so totals can be reduced element by element).
  PhaseTimer(int64_t heads, c10::Device device);
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  // An interval of `phase` (of head `head` for Phase::Head) starts now (device clock: at this point
  // of the current stream). Returns a token for end(), or -1 while paused.
  int begin(Phase phase, int64_t head = 0, PhaseClock clock = PhaseClock::Device);
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
  int index_of(Phase phase, int64_t head) const;
  void fold_finished(bool wait);  // CUDA: adds finished event pairs to the totals

  std::vector<std::string> names_;
  std::vector<Phase> phase_of_;  // by index in names_
  std::vector<int> first_;       // by Phase: its first index in names_
  int64_t heads_;
  c10::Device device_;
  mutable std::mutex mu_;
  bool paused_ = false;
  std::vector<double> seconds_;
  std::vector<int64_t> counts_;
  std::vector<std::unique_ptr<Open>> open_;  // by token; null = free slot
  std::vector<Pending> pending_;             // CUDA event pairs not yet read
  std::vector<void*> event_pool_;            // CUDA events ready for reuse
};

// Times its own lifetime as one interval of `phase` on `timer` (nothing when `timer` is null): the
// interval ends where the scope's block ends.
class PhaseScope {
 public:
  PhaseScope(PhaseTimer* timer, Phase phase, PhaseClock clock = PhaseClock::Device)
      : timer_(timer), token_(timer ? timer->begin(phase, 0, clock) : -1) {}
  PhaseScope(PhaseTimer* timer, Phase phase, int64_t head)  // Phase::Head
      : timer_(timer), token_(timer ? timer->begin(phase, head) : -1) {}
  ~PhaseScope() {
    if (timer_ && token_ >= 0) timer_->end(token_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTimer* timer_;
  int token_;
};

// The one way the step reads a value that tensor ops computed to the host: `t` on the CPU (a copy
// from the device, or `t` itself), timed as one Phase::HostSync interval (host clock) on `timer`
// (when not null) on any device. On a GPU the read blocks until the device has run what was queued
// before it; on the CPU it costs nothing but is counted all the same, so perf/host_syncs_per_step
// says on any machine how often the code would wait for a device.
at::Tensor read_to_host(PhaseTimer* timer, const at::Tensor& t);

}  // namespace wmtp
