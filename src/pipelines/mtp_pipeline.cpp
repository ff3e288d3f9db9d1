// The MTP policy pipeline: the weighted MTP loss composed with a token weighting
// (pipelines/mtp_pipeline.h).
#include "pipelines/mtp_pipeline.h"

#include <utility>

#include "core/error.h"

namespace wmtp {

NamedStats TokenWeighting::eval_batch(const MicroBatch& mb, const WeightedMtpLoss& loss) { return loss.eval(mb, {}); }

MtpPolicyPipeline::MtpPolicyPipeline(std::unique_ptr<TokenWeighting> weighting) : weighting_(std::move(weighting)) {
  WMTP_CHECK(weighting_, "an MTP policy pipeline needs a token weighting");
}

void MtpPolicyPipeline::attach(const RunContext& ctx) {
  loss_.attach(ctx);
  weighting_->attach(ctx, loss_);
}

StepPlan MtpPolicyPipeline::begin_step(const StepContext& step_ctx, const std::vector<MicroBatch>& mbs) {
  return weighting_->plan_step(step_ctx, mbs, loss_);
}

NamedStats MtpPolicyPipeline::forward_backward(const StepContext&, const MicroBatch& mb, const MicroBatchPlan& plan,
                                               const at::Tensor& counts) {
  NamedStats st = loss_.train(mb, plan.weights, counts);
  st.accumulate(plan.prepared);  // what the weighting measured for this micro-batch in begin_step
  return st;
}

double MtpPolicyPipeline::finish_step(const StepContext& step_ctx, const NamedStats& global, MetricsRecord& rec) {
  const double loss = loss_.finish_step(global, rec);
  weighting_->finish_step(step_ctx, global, loss, rec);
  return loss;
}

NamedStats MtpPolicyPipeline::eval_batch(const MicroBatch& mb) { return weighting_->eval_batch(mb, loss_); }

double MtpPolicyPipeline::finish_eval(const NamedStats& global, MetricsRecord& rec) {
  return weighting_->finish_eval(global, loss_.finish_eval(global, rec), rec);
}

StepPlan UniformWeighting::plan_step(const StepContext&, const std::vector<MicroBatch>& mbs,
                                     const WeightedMtpLoss& loss) {
  return loss.plan(mbs);
}

}  // namespace wmtp
