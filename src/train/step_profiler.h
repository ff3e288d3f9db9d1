// StepProfiler: a LibTorch profiler trace of a few optimizer steps after warm-up, for `[logging]
// profile_steps = N` (e.g. `--set logging.profile_steps=3`). Rank 0 records every operator (and on a
// GPU every kernel, through Kineto/CUPTI) of steps profile_warmup + 1 .. profile_warmup + N of this
// invocation, with the trainer's phases (core/phase_timer.h) as named ranges, and writes
// <run_dir>/trace_rank0.json: Chrome-trace JSON that Perfetto (ui.perfetto.dev) and chrome://tracing
// open. Where LibTorch was built without Kineto (Debian's CPU build) the same events are written
// from the profiler's event list instead, CPU operators only.
//
// The API used (torch/csrc/autograd/profiler_kineto.h: prepareProfiler, enableProfiler,
// disableProfiler, ProfilerResult::save/events; ProfilerConfig(ProfilerState::KINETO)) is the same in
// LibTorch 1.13 and 2.x.
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace wmtp {

class StepProfiler {
 public:
  // `steps` 0: never records. Only `writer` (rank 0) records.
  StepProfiler(int64_t steps, int64_t warmup, const std::string& run_dir, bool writer, c10::Device device);
  ~StepProfiler();  // a trace still recording (the run ended early) is written
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Around each optimizer step; `done` = steps this invocation has completed before (before_step)
  // or including (after_step) this one. after_step returns the trace's path when it was just
  // written, else "".
  void before_step(int64_t done);
  std::string after_step(int64_t done);

  const std::string& path() const { return path_; }

 private:
  std::string finish();

  int64_t steps_, warmup_;
  std::string path_;
  bool writer_;
  c10::Device device_;
  bool recording_ = false, written_ = false;
};

}  // namespace wmtp
