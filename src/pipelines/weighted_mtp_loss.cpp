// The MTP policy's weighted loss (pipelines/weighted_mtp_loss.h).
#include "pipelines/weighted_mtp_loss.h"

#include <ATen/ATen.h>

#include "comm/device.h"
#include "model/mtp.h"
#include "model/mtp_loss.h"
#include "shard/sharded_model.h"
#include "train/flops.h"
#include "train/metrics.h"

namespace wmtp {

const Batch& WeightedMtpLoss::cpu_or_device(const MicroBatch& mb) {
  return mb.cpu_batch.labels.defined() ? mb.cpu_batch : mb.batch;
}

void WeightedMtpLoss::attach(const RunContext& ctx) {
  policy_ = ctx.trained;
  pass_ = mtp_pass_options(ctx.settings.model);
  pass_.phases = ctx.phases;
  pass_.read_sums = false;  // a step's figures are read once, with the gradient norm (train_step)
  const size_t K = size_t(n_future());
  train_stats_ = StatLayout();
  train_stats_.sum("loss").sum("weighted_sum", K).sum("unweighted_sum", K).sum("count", K);
  eval_stats_ = StatLayout();
  eval_stats_.sum("unweighted_sum", K).sum("count", K).sum("weighted_sum", K);
}

int64_t WeightedMtpLoss::n_future() const { return policy_->model->n_future(); }

StepPlan WeightedMtpLoss::plan(const std::vector<MicroBatch>& mbs) const {
  const int64_t K = n_future();
  StepPlan plan;
  plan.micro_batches.resize(mbs.size());
  plan.counts = at::zeros({int64_t(mbs.size()), K}, at::kDouble);
  double* c = plan.counts.data_ptr<double>();
  for (const MicroBatch& mb : mbs)
    for (int64_t n : count_valid_targets(cpu_or_device(mb).labels, K)) *c++ = double(n);
  return plan;
}

NamedStats WeightedMtpLoss::train(const MicroBatch& mb, const at::Tensor& weights, const at::Tensor& counts) const {
  const MtpModel& model = *policy_->model;
  const int64_t K = model.n_future();
  MtpPassResult r = mtp_forward_backward(model, *policy_->engine,
                                         MtpBatch{mb.batch.tokens, mb.batch.labels, weights, cpu_or_device(mb).labels},
                                         to_device(counts, mb.batch.tokens.device()), pass_);
  NamedStats st = train_stats_.make();
  st.set("weighted_sum", r.figures.narrow(0, 0, K));
  st.set("unweighted_sum", r.figures.narrow(0, K, K));
  st.set("loss", r.figures.narrow(0, 2 * K, 1));
  st.set("count", std::vector<double>(r.count.begin(), r.count.end()));
  st.tokens = cpu_or_device(mb).attention_mask.sum().item<double>();
  st.flops = st.tokens * train_flops_per_token(model.args());
  return st;
}

NamedStats WeightedMtpLoss::eval(const MicroBatch& mb, const at::Tensor& weights) const {
  const MtpModel& model = *policy_->model;
  const int64_t K = model.n_future();
  MtpPassResult r = mtp_forward_loss(model, *policy_->engine, MtpBatch{mb.batch.tokens, mb.batch.labels, weights},
                                     pass_);
  NamedStats st = eval_stats_.make();
  for (int64_t k = 0; k < K; ++k) {
    st.set("unweighted_sum", size_t(k), r.unweighted_sum[size_t(k)]);
    st.set("count", size_t(k), double(r.count[size_t(k)]));
    st.set("weighted_sum", size_t(k), r.weighted_sum[size_t(k)]);
  }
  return st;
}

double WeightedMtpLoss::finish_step(const NamedStats& g, MetricsRecord& rec) const {
  const int64_t K = n_future();
  const double loss = g.get("loss");
  rec.set("train/loss", loss);
  for (int64_t k = 0; k < K; ++k) {
    const double c = g.get("count", size_t(k));
    rec.set("train/loss_head_" + std::to_string(k), c > 0 ? g.get("unweighted_sum", size_t(k)) / c : 0.0);
  }
  return loss;
}

double WeightedMtpLoss::finish_eval(const NamedStats& g, MetricsRecord& rec) const {
  const int64_t K = n_future();
  double total = 0;
  int64_t n = 0;
  std::vector<double> per_head;
  for (int64_t k = 0; k < K; ++k) {
    const double c = g.get("count", size_t(k));
    per_head.push_back(c > 0 ? g.get("unweighted_sum", size_t(k)) / c : 0.0);
    if (c > 0) total += per_head.back(), ++n;
  }
  const double loss = n ? total / double(n) : 0.0;
  rec.set("val/loss", loss);
  for (int64_t k = 0; k < K; ++k) rec.set("val/loss_head_" + std::to_string(k), per_head[size_t(k)]);
  return loss;
}

}  // namespace wmtp
