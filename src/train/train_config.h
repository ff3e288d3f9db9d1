// Config structs owned by the trainer: [training], [lr_schedule], [logging]. Component configs
// ([model], [data], [sharding], [optimizer], [lora], [checkpoint]) live next to their components.
// Defaults follow weighted_mtp's production baseline where it has one.
#pragma once
#include <cstdint>
#include <string>

#include "core/log.h"
#include "track/tracking_config.h"

namespace wmtp {

// [training] loss_normalization: by the step's global token count, or weighted_mtp's
// per-micro-batch mean.
enum class LossNormalization { Global, MicroBatch };
enum class LrScheduleType { Constant, Linear, Cosine };

struct TrainingConfig {
  double n_epochs = 1.0;       // fractional allowed
  int64_t max_steps = 0;       // > 0: stop after this many optimizer steps (overrides n_epochs)
  int global_batch_size = 96;  // sequences per optimizer step, all ranks together
  int micro_batch_size = 12;   // sequences per rank per forward/backward
  int64_t seed = 42;
  LossNormalization loss_normalization = LossNormalization::Global;
  std::string run_dir = "runs/default";
  std::string init_weights;      // model-only checkpoint (convert-checkpoint import); empty = seeded init
  int64_t eval_every = 0;        // validation cadence in optimizer steps (0 = checkpoint.every)
  int64_t stop_after_steps = 0;  // stop (checkpoint, exit 75) after this many steps of this invocation
  template <class V>
  void visit(V& v) {
    v.field("n_epochs", n_epochs, "epochs over the sampled training set (fractional allowed)");
    v.field("max_steps", max_steps, "stop after this many optimizer steps (0 = use n_epochs)");
    v.field("global_batch_size", global_batch_size,
            "sequences per optimizer step over all ranks; accumulation = global / (micro * world)");
    v.field("micro_batch_size", micro_batch_size, "sequences per rank per forward/backward");
    v.field("seed", seed, "seed for initialization, sampling and dropout");
    v.choice("loss_normalization", loss_normalization, {"global", "micro_batch"},
             "global: normalize by the step's global token count; micro_batch: weighted_mtp's per-micro-batch mean");
    v.field("run_dir", run_dir, "where metrics.jsonl and config.toml go");
    v.field("init_weights", init_weights,
            "initial weights: a model-only HDF5 checkpoint (convert-checkpoint import); empty = seeded random init");
    v.field("eval_every", eval_every, "validation every N optimizer steps (0 = at every checkpoint) and at the end");
    v.field("stop_after_steps", stop_after_steps,
            "checkpoint and exit 75 (resume me) after this many steps of this invocation, like a signal (0 = never)");
  }
  void validate() const;  // throws Error(Usage) naming the key
};

struct LrScheduleConfig {
  LrScheduleType type = LrScheduleType::Cosine;
  double warmup_ratio = 0.03;
  double min_lr_ratio = 0.005;
  template <class V>
  void visit(V& v) {
    v.choice("type", type, {"constant", "linear", "cosine"}, "learning-rate schedule, stepped per optimizer step");
    v.field("warmup_ratio", warmup_ratio, "fraction of total steps of linear warm-up");
    v.field("min_lr_ratio", min_lr_ratio, "final lr as a fraction of the peak (linear, cosine)");
  }
  void validate() const;
};

struct LoggingConfig {
  int log_interval = 5;
  LogLevel level = LogLevel::Info;  // the program's log (app/train_program.cpp sets it)
  double peak_tflops = 0.0;
  TrackingConfig tracking;     // tensorboard, mlflow_* keys of this same section
  int64_t profile_steps = 0;   // > 0: a LibTorch profiler trace of this many steps (train/step_profiler.h)
  int64_t profile_warmup = 3;  // steps of this invocation run before the trace starts
  template <class V>
  void visit(V& v) {
    v.field("log_interval", log_interval, "optimizer steps between progress lines");
    v.choice("level", level, {"debug", "info", "warn"}, "log level");
    v.field("peak_tflops", peak_tflops,
            "per-rank peak TFLOP/s for MFU (0 = time a matmul in the compute dtype at start-up)");
    tracking.visit(v);
    v.field("profile_steps", profile_steps,
            "record this many optimizer steps with LibTorch's profiler into <run_dir>/trace_rank0.json "
            "(Chrome trace: Perfetto, chrome://tracing); 0 = off");
    v.field("profile_warmup", profile_warmup,
            "steps run before the profiled ones (allocator, kernels and prefetch settle)");
  }
  void validate() const;
};

}  // namespace wmtp
