// train_step: one optimizer step of a pipeline over this rank's micro-batches — the step the Trainer
// runs every iteration and the one the equivalence tests drive (docs/training.md, "One step"):
//
//   begin_step (all micro-batches, before any backward)
//   -> local_counts summed over every rank (one all-reduce)
//   -> zero_grad, forward_backward per micro-batch with the global counts (or, under micro-batch
//      normalisation, the micro-batch's own: Pipeline::micro_counts); gradients are
//      reduce-scattered as sums inside backward
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
  NamedStats stats;       // summed (and maximised) over every micro-batch of every rank
  MetricsRecord rec;     // the pipeline's train/* keys
  LinkBytes sent;        // what this rank sent in the step's collectives, by link (TrainStepOptions::links)
};

struct TrainStepOptions {
  PhaseTimer* phases = nullptr;  // times Phase::Prepare, Clip and Optimizer (core/phase_timer.h)
  // Called after the last backward, before the clip: tests read the unclipped gradients here.
  std::function<void()> after_backward;
  // The process's byte counter (comm/link_bytes.h; the runtime's): the step's share lands in
  // TrainStepResult::sent. Null: not measured.
  const LinkCounter* links = nullptr;
};

// `comm` reduces the counts and the statistics (host tensors: any communicator); `mbs` are handed to
// begin_step, which may fill their per-micro-batch tensors (MicroBatch::weights).
TrainStepResult train_step(Pipeline& pipeline, std::vector<MicroBatch>& mbs, ShardedAdamW& opt, Communicator& comm,
                      const StepContext& info, double lr_factor, const TrainStepOptions& options = {});

// Sums and maxima of a NamedStats over every rank: one all-reduce each (tokens and flops ride with the
// sums), after reading any value still on the device. Validation reduces its statistics with it too.
NamedStats reduce_stats(Communicator& comm, NamedStats local);

}  // namespace wmtp
