// One optimizer step (train/train_step.h): it reads top-down on one screen.
#include "train/train_step.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/phase_timer.h"
#include "shard/sharded_adamw.h"

namespace wmtp {

std::vector<at::Tensor> normalizing_counts(Communicator& comm, const StepPlan& plan, const StepContext& step_ctx) {
  const int64_t n = plan.counts.size(0);
  std::vector<at::Tensor> out;
  if (step_ctx.normalization == LossNormalization::MicroBatch) {
    const double share = double(step_ctx.geometry->accumulation_steps()) * double(step_ctx.geometry->world_size);
    for (int64_t m = 0; m < n; ++m) out.push_back(plan.counts[m] * share);
    return out;
  }
  at::Tensor global = plan.counts.sum(0);
  comm.all_reduce(global, ReduceOp::Sum);
  out.assign(size_t(n), global);
  return out;
}

TrainStepResult train_step(Pipeline& pipeline, const std::vector<MicroBatch>& mbs, ShardedAdamW& opt,
                           Communicator& comm, const StepContext& step_ctx, double lr_factor,
                           const TrainStepOptions& options) {
  PhaseTimer* phases = options.phases;
  const LinkBytes sent_before = options.links ? options.links->total() : LinkBytes{};
  // 1. what the pipeline needs from all micro-batches before any backward, and the normalizing
  //    counts of each (docs/training.md)
  StepPlan plan;
  std::vector<at::Tensor> counts;
  {
    PhaseScope phase(phases, Phase::Prepare);
    plan = pipeline.begin_step(step_ctx, mbs);
    const int64_t counted = plan.counts.defined() && plan.counts.dim() == 2 ? plan.counts.size(0) : -1;
    WMTP_CHECK(plan.micro_batches.size() == mbs.size() && counted == int64_t(mbs.size()), "train-", pipeline.name(),
               ": begin_step planned ", plan.micro_batches.size(), " micro-batches and counted ", counted, " for ",
               mbs.size());
    counts = normalizing_counts(comm, plan, step_ctx);
  }
  if (options.after_plan) options.after_plan(plan);

  // 2. forward/backward per micro-batch; gradients reduce-scattered as sums inside backward
  opt.zero_grad();
  NamedStats local;
  for (size_t m = 0; m < mbs.size(); ++m)
    local.accumulate(pipeline.forward_backward(step_ctx, mbs[m], plan.micro_batches[m], counts[m]));
  if (options.after_backward) options.after_backward();

  // 3. the step's one host read: this rank's squared gradient norm with every statistic the
  //    micro-batches left on the device; then clip and update (a non-finite norm is refused before
  //    the update: the caller says why)
  TrainStepResult r;
  {
    PhaseScope phase(phases, Phase::Clip);
    const at::Tensor norm_sq = local.read_pending(phases, opt.local_grad_norm_sq());
    r.grad_norm = opt.clip_to_local_norm_sq(norm_sq[0].item<double>());
  }
  if (!std::isfinite(r.grad_norm)) {
    r.applied = false;
    if (options.links) r.sent = options.links->total() - sent_before;
    return r;
  }
  opt.set_lr_scale(lr_factor);
  {
    PhaseScope phase(phases, Phase::Optimizer);
    opt.step();
  }

  // 4. statistics reduced once; the pipeline turns them into its loss, metrics and state updates
  r.stats = reduce_stats(comm, std::move(local));
  r.loss = pipeline.finish_step(step_ctx, r.stats, r.rec);
  if (options.links) r.sent = options.links->total() - sent_before;
  return r;
}

NamedStats reduce_stats(Communicator& comm, NamedStats local) {
  local.read_pending(nullptr);
  std::vector<double> sums = local.sum;
  sums.push_back(local.tokens);
  sums.push_back(local.flops);
  at::Tensor t = at::tensor(sums, at::kDouble);
  comm.all_reduce(t, ReduceOp::Sum);
  NamedStats g;
  g.layout = local.layout;
  const double* p = t.data_ptr<double>();
  g.sum.assign(p, p + local.sum.size());
  g.tokens = p[local.sum.size()];
  g.flops = p[local.sum.size() + 1];
  if (!local.max.empty()) {
    at::Tensor m = at::tensor(local.max, at::kDouble);
    comm.all_reduce(m, ReduceOp::Max);
    g.max.assign(m.data_ptr<double>(), m.data_ptr<double>() + local.max.size());
  }
  return g;
}

}  // namespace wmtp
