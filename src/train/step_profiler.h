// StepProfiler: a LibTorch profiler trace of a few optimizer steps after warm-up, for `[logging]
// profile_steps = N` (e.g. `--set logging.profile_steps=3`). Rank 0 records every operator (and on a
// GPU every kernel, through Kineto/CUPTI) of steps profile_warmup + 1 .. profile_warmup + N of this
// invocation, with the trainer's phases (core/phase_timer.h) as named ranges, and writes
// <run_dir>/trace_rank0.json: Chrome-trace JSON that Perfetto (ui.perfetto.dev) and chrome://tracing
// open (a resumed run that would overwrite an earlier trace writes trace_rank0_step<N>.json instead,
// N its first step). The file is written under a temporary name and renamed: a trace that cannot be
// written (the path is a directory, the disk is full) leaves no partial file, and is the caller's
// warning, not the run's end. Where LibTorch was built without Kineto (Debian's CPU build) the same events are written
// from the profiler's event list instead, CPU operators only.
//
// The API used (torch/csrc/autograd/profiler_kineto.h: prepareProfiler, enableProfiler,
// disableProfiler, ProfilerResult::save/events; ProfilerConfig(ProfilerState::KINETO)) is the same in
// LibTorch 1.13 and 2.x.
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>

namespace wmtp {

// A trace written, or one that could not be.
struct TraceWrite {
  int64_t first = 0, last = 0;  // the (global) steps it holds
  std::string path;             // where it is, or where it was to go
  std::string failure;          // why it could not be written ("" when it was)
};

class StepProfiler {
 public:
  // `steps` 0: never records. Only `writer` (rank 0) records.
  StepProfiler(int64_t steps, int64_t warmup, const std::string& run_dir, bool writer, c10::Device device);
  ~StepProfiler();  // a trace still recording (the run is ending on an error) is dropped
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Before the first step: this invocation starts after global step `start_step` and will end at
  // `end_step` at the latest (max_steps, stop_after_steps). Chooses the trace's file (an earlier one
  // is kept) and returns what the user should know ("" = nothing): a window past `end_step` records
  // nothing, one it cuts is shorter, an earlier trace is kept.
  std::string plan(int64_t start_step, int64_t end_step);

  // Around each optimizer step; `done` = steps this invocation has completed before (before_step)
  // or including (after_step) this one. after_step returns the trace once its last step ends.
  void before_step(int64_t done);
  std::optional<TraceWrite> after_step(int64_t done);
  // The run ends (its last step, a stop) while the window records: the steps it has, written now.
  std::optional<TraceWrite> finish_early(int64_t done);

  const std::string& path() const { return path_; }

 private:
  TraceWrite finish(int64_t done);

  int64_t steps_, warmup_;
  std::string run_dir_, path_;
  bool writer_;
  c10::Device device_;
  int64_t start_step_ = 0;
  bool recording_ = false, written_ = false;
};

}  // namespace wmtp
