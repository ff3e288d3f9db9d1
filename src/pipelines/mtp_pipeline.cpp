// The MTP policy pipeline (pipelines/mtp_pipeline.h).
#include "pipelines/mtp_pipeline.h"

#include <ATen/ATen.h>

#include "comm/device.h"
#include "core/error.h"
#include "model/mtp.h"
#include "model/mtp_loss.h"
#include "shard/sharded_model.h"
#include "train/flops.h"
#include "train/metrics.h"

namespace wmtp {

const Batch& MtpPolicyPipeline::host_or_device(const MicroBatch& mb) {
  return mb.host.labels.defined() ? mb.host : mb.batch;
}

void MtpPolicyPipeline::attach(const RunContext& ctx) {
  ctx_ = ctx;
  step_opts_ = mtp_pass_options(ctx.settings.model);
  step_opts_.phases = ctx.phases;
  step_opts_.read_sums = false;  // a step's figures are read once, with the gradient norm (train_step)
  const size_t K = size_t(n_future());
  train_stats_ = StatLayout();
  train_stats_.sum("loss").sum("weighted_sum", K).sum("unweighted_sum", K).sum("count", K);
  eval_stats_ = StatLayout();
  eval_stats_.sum("unweighted_sum", K).sum("count", K);
}

int64_t MtpPolicyPipeline::n_future() const { return ctx_.trained->model->n_future(); }

std::vector<double> MtpPolicyPipeline::valid_counts(const std::vector<MicroBatch>& mbs) const {
  const int64_t K = n_future();
  std::vector<double> counts(size_t(K), 0.0);
  for (const auto& mb : mbs) {
    std::vector<int64_t> c = count_valid_targets(host_or_device(mb).labels, K);
    for (int64_t k = 0; k < K; ++k) counts[size_t(k)] += double(c[size_t(k)]);
  }
  return counts;
}

std::vector<double> MtpPolicyPipeline::local_counts(const StepContext&, const std::vector<MicroBatch>& mbs) {
  return valid_counts(mbs);
}

NamedStats MtpPolicyPipeline::forward_backward(const StepContext&, const MicroBatch& mb, const std::vector<double>& counts) {
  return train_pass(mb, to_device(at::tensor(counts, at::kDouble), mb.batch.tokens.device()));
}

NamedStats MtpPolicyPipeline::train_pass(const MicroBatch& mb, const at::Tensor& counts) {
  const MtpModel& model = *ctx_.trained->model;
  const int64_t K = model.n_future();
  MtpPassResult r = mtp_forward_backward(
      model, *ctx_.trained->engine, MtpBatch{mb.batch.tokens, mb.batch.labels, mb.weights, host_or_device(mb).labels},
      counts, step_opts_);
  NamedStats st = train_stats_.make();
  st.set("weighted_sum", r.figures.narrow(0, 0, K));
  st.set("unweighted_sum", r.figures.narrow(0, K, K));
  st.set("loss", r.figures.narrow(0, 2 * K, 1));
  st.set("count", std::vector<double>(r.count.begin(), r.count.end()));
  st.tokens = host_or_device(mb).attention_mask.sum().item<double>();
  st.flops = st.tokens * train_flops_per_token(model.args());
  return st;
}

double MtpPolicyPipeline::finish_step(const StepContext&, const NamedStats& g, MetricsRecord& rec) {
  const int64_t K = n_future();
  const double loss = g.get("loss");
  rec.set("train/loss", loss);
  for (int64_t k = 0; k < K; ++k) {
    const double c = g.get("count", size_t(k));
    rec.set("train/loss_head_" + std::to_string(k), c > 0 ? g.get("unweighted_sum", size_t(k)) / c : 0.0);
  }
  return loss;
}

NamedStats MtpPolicyPipeline::eval_batch(const MicroBatch& mb) {
  const MtpModel& model = *ctx_.trained->model;
  const int64_t K = model.n_future();
  MtpPassResult r = mtp_forward_loss(model, *ctx_.trained->engine, MtpBatch{mb.batch.tokens, mb.batch.labels, {}}, step_opts_);
  NamedStats st = eval_stats_.make();
  for (int64_t k = 0; k < K; ++k) {
    st.set("unweighted_sum", size_t(k), r.unweighted_sum[size_t(k)]);
    st.set("count", size_t(k), double(r.count[size_t(k)]));
  }
  return st;
}

double MtpPolicyPipeline::finish_eval(const NamedStats& g, MetricsRecord& rec) {
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
