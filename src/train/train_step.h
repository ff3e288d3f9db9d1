// train_step: one optimizer step of a pipeline over this rank's micro-batches — the step the Trainer
// runs every iteration and the one the equivalence tests drive (docs/training.md, "One step"):
//
//   begin_step (all micro-batches, before any backward) -> the step's plan
//   -> the plan's counts turned into each micro-batch's normalizers, by one rule for every pipeline:
//      summed over the micro-batches and every rank (one all-reduce), or under micro-batch
//      normalization the micro-batch's own times accumulation x world
//   -> zero_grad, forward_backward per micro-batch with its part of the plan and its counts;
//      gradients are reduce-scattered as sums inside backward
//   -> one host read: the squared gradient norm with the statistics the micro-batches left on the
//      device -> clip -> AdamW at the configured lr x lr_factor
//   -> the statistics of every micro-batch of every rank reduced once -> finish_step
//
// Collective: every rank calls it with the same number of micro-batches. Reading and uploading the
// micro-batches and seeding dropout stay with the caller (train/micro_batches.h, the Trainer).
#pragma once
#include <functional>
#include <vector>

#include "comm/link_bytes.h"
#include "train/metrics.h"
#include "train/pipeline.h"

namespace wmtp {

class Communicator;
class PhaseTimer;
class ShardedAdamW;

// What one optimizer step produced, already reduced over every rank.
struct TrainStepResult {
  // false: the gradient norm was not finite (the same verdict on every rank: the norm is
  // all-reduced); nothing was updated and finish_step was not called. The caller refuses the step.
  bool applied = true;
  double loss = 0;       // finish_step's step loss
  double grad_norm = 0;  // before clipping
  NamedStats stats;      // summed (and maximized) over every micro-batch of every rank
  MetricsRecord rec;     // the pipeline's train/* keys
  LinkBytes sent;        // what this rank sent in the step's collectives, by link (TrainStepOptions::links)
};

struct TrainStepOptions {
  PhaseTimer* phases = nullptr;  // times Phase::Prepare, Clip and Optimizer (core/phase_timer.h)
  // Called with the step's plan after begin_step: tests read the pipeline's token weights here.
  std::function<void(const StepPlan&)> after_plan;
  // Called after the last backward, before the clip: tests read the unclipped gradients here.
  std::function<void()> after_backward;
  // The process's byte counter (comm/link_bytes.h; the runtime's): the step's share lands in
  // TrainStepResult::sent. Null: not measured.
  const LinkCounter* links = nullptr;
};

// `comm` reduces the counts (where the plan left them) and the statistics (host tensors): the engines'
// communicator. `step_ctx.geometry` must be set.
TrainStepResult train_step(Pipeline& pipeline, const std::vector<MicroBatch>& mbs, ShardedAdamW& opt,
                           Communicator& comm, const StepContext& step_ctx, double lr_factor,
                           const TrainStepOptions& options = {});

// The counts micro-batch m's loss is normalized by, from the step's plan: the one normalization rule
// (`step_ctx.normalization`). Global: the plan's counts summed over its micro-batches and every rank (one
// all-reduce over `comm`), the same for every micro-batch, so a step is the same computation at any
// world size and accumulation. MicroBatch: micro-batch m's own times accumulation x world, weighted_mtp's
// per-micro-batch mean averaged over micro-batches and ranks (docs/parity.md).
std::vector<at::Tensor> normalizing_counts(Communicator& comm, const StepPlan& plan, const StepContext& step_ctx);

// Sums and maxima of a NamedStats over every rank: one all-reduce each (tokens and flops ride with the
// sums), after reading any value still on the device. Validation reduces its statistics with it too.
NamedStats reduce_stats(Communicator& comm, NamedStats local);

}  // namespace wmtp
