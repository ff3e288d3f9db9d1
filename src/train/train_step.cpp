// One optimizer step (train/train_step.h): it reads top-down on one screen.
#include "train/train_step.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "comm/communicator.h"
#include "core/phase_timer.h"
#include "shard/sharded_adamw.h"

namespace wmtp {
namespace {

std::vector<double> reduce_counts(Communicator& comm, const std::vector<double>& local) {
  if (local.empty()) return {};
  at::Tensor t = at::tensor(local, at::kDouble);
  comm.all_reduce(t, ReduceOp::Sum);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + local.size());
}

}  // namespace

TrainStepResult train_step(Pipeline& pipeline, std::vector<MicroBatch>& mbs, ShardedAdamW& opt, Communicator& comm,
                      const StepContext& info, double lr_factor, const TrainStepOptions& options) {
  PhaseTimer* phases = options.phases;
  const LinkBytes sent_before = options.links ? options.links->total() : LinkBytes{};
  // 1. what the pipeline needs from all micro-batches before any backward; the step's global
  //    normalisation counts: one all-reduce (docs/training.md)
  std::vector<double> global_counts;
  {
    PhaseScope phase(phases, Phase::Prepare);
    pipeline.begin_step(info, mbs);
    global_counts = reduce_counts(comm, pipeline.local_counts(info, mbs));
  }

  // 2. forward/backward per micro-batch; gradients reduce-scattered as sums inside backward
  opt.zero_grad();
  NamedStats local;
  for (const MicroBatch& mb : mbs) {
    const std::vector<double> counts = info.micro_batch_normalization ? pipeline.micro_counts(info, mb) : global_counts;
    local.accumulate(pipeline.forward_backward(info, mb, counts));
  }
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
  r.loss = pipeline.finish_step(info, r.stats, r.rec);
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
