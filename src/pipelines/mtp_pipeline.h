// MtpPolicyPipeline: every pipeline that trains the MTP policy of [model]/[lora] — train-baseline,
// train-rho1, train-verifiable — as one composition: the weighted MTP loss (pipelines/
// weighted_mtp_loss.h) and a token weighting (pipelines/token_weighting.h), which is all that differs
// between them. Each hook calls the loss, then the weighting, in a fixed order:
//
//   attach          the loss declares its statistics, then the weighting its own
//   begin_step      the weighting's plan (weights, prepared statistics, counts)
//   forward_backward  the loss with the micro-batch's weights and counts, plus its prepared statistics
//   finish_step     the loss's train/* keys, then the weighting's (and its state updates)
//   eval_batch      the weighting's (by default the loss's unweighted pass)
//   finish_eval     the loss's val/* keys, then the weighting's
//
//   MtpPolicyPipeline pipeline(std::make_unique<Rho1Weighting>());   // apps/train_rho1.cpp
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "pipelines/token_weighting.h"
#include "pipelines/weighted_mtp_loss.h"

namespace wmtp {

class MtpPolicyPipeline final : public Pipeline {
 public:
  explicit MtpPolicyPipeline(std::unique_ptr<TokenWeighting> weighting);
  std::string name() const override { return weighting_->name(); }
  void add_config(ConfigSet& set) override { weighting_->add_config(set); }
  void check(const PipelineSettings& settings) const override { weighting_->check(settings); }
  std::vector<ModelSpec> frozen_models(const PipelineSettings& settings, int64_t data_vocab) const override {
    return weighting_->frozen_models(settings, data_vocab);
  }
  void attach(const RunContext& ctx) override;

  StepPlan begin_step(const StepContext& step_ctx, const std::vector<MicroBatch>& mbs) override;
  NamedStats forward_backward(const StepContext& step_ctx, const MicroBatch& mb, const MicroBatchPlan& plan,
                              const at::Tensor& counts) override;
  double finish_step(const StepContext& step_ctx, const NamedStats& global, MetricsRecord& rec) override;
  NamedStats eval_batch(const MicroBatch& mb) override;
  double finish_eval(const NamedStats& global, MetricsRecord& rec) override;

  void save_state(TrainState& st) const override { weighting_->save_state(st); }
  std::vector<std::string> check_state(const TrainState& st, const CheckpointReader& file) const override {
    return weighting_->check_state(st, file);
  }
  void load_state(const TrainState& st, const CheckpointReader& file) override { weighting_->load_state(st, file); }

  const WeightedMtpLoss& loss() const { return loss_; }

 private:
  WeightedMtpLoss loss_;
  std::unique_ptr<TokenWeighting> weighting_;
};

// train-baseline: uniform token weights, each head normalized by its valid targets.
class UniformWeighting final : public TokenWeighting {
 public:
  std::string name() const override { return "baseline"; }
  StepPlan plan_step(const StepContext&, const std::vector<MicroBatch>& mbs, const WeightedMtpLoss& loss) override;
};

}  // namespace wmtp
