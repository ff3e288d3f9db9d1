// Rho1Weighting: train-rho1 (docs/rho1.md), the MTP policy pipeline (pipelines/mtp_pipeline.h) with
// this token weighting. The policy is trained only on the tokens where it lags a frozen next-token
// reference model most:
//
//   plan_step    for every micro-batch of the step: reference CE and policy CE per head and source
//                position (no-grad forwards, dropout off, sequential heads, O(V) memory), excess
//                loss, then the selection — scope global: one exact top-k_percent per head over the
//                whole step on every rank (pipelines/losses/rho1.h); local: per micro-batch quantile.
//                The plan: each micro-batch's weights = its binary [B, S, K] selection, its prepared
//                statistics = its selected, excess_sum and valid_labels (and, scope global, the step's
//                threshold per head) with the scoring's FLOPs; its counts per head = its selected
//                tokens ("selected", the paper: counted on the device) or its valid tokens ("valid",
//                weighted_mtp). train_step sums them over the step and every rank.
//   forward/backward  the weighted MTP CE with those weights (pipelines/weighted_mtp_loss.h).
//   validation   the same scoring on the validation set; scope global selects over the whole
//                validation set (every rank) in finish_eval, local per micro-batch.
//
// The reference ([rho1] reference) is a wmtp checkpoint of an n_future_tokens = 1 language model (not
// a critic) with the policy's vocabulary and tokenizer (checked against the training data's
// tokenizer fingerprint when the checkpoint records one); it is sharded through the engine as
// frozen units. Checkpoints record it (file, fingerprint): a resume with another reference is
// refused unless [rho1] resume_with_other_reference.
//
// Step statistics declared after the loss's (train/named_stats.h), per head k unless said:
//   train: selected (selected tokens), excess_sum (excess over the head's valid tokens),
//          valid_labels (label positions != -100, one value); scope global: threshold (a maximum:
//          the step's threshold, the same in every micro-batch)
//   eval:  selected_ce_sum, selected (local scope; global scope selects in finish_eval), excess_sum
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "pipelines/losses/rho1.h"
#include "pipelines/token_weighting.h"

namespace wmtp {

class Rho1Weighting final : public TokenWeighting {
 public:
  Rho1Weighting() = default;
  explicit Rho1Weighting(Rho1Config cfg) : cfg_(std::move(cfg)) {}  // tests: [rho1] without a file
  std::string name() const override { return "rho1"; }
  void add_config(ConfigSet& set) override;
  void check(const PipelineSettings& settings) const override;
  std::vector<ModelSpec> frozen_models(const PipelineSettings& settings, int64_t data_vocab) const override;
  void attach(const RunContext& ctx, WeightedMtpLoss& loss) override;

  StepPlan plan_step(const StepContext& step_ctx, const std::vector<MicroBatch>& mbs,
                     const WeightedMtpLoss& loss) override;
  void finish_step(const StepContext& step_ctx, const NamedStats& global, double loss, MetricsRecord& rec) override;

  NamedStats eval_batch(const MicroBatch& mb, const WeightedMtpLoss& loss) override;
  double finish_eval(const NamedStats& global, double loss, MetricsRecord& rec) override;

  const Rho1Config& config() const { return cfg_; }

 private:
  // Reference and policy CE of one batch (no grad, dropout off) -> excess loss; the policy's CE per
  // head and source position in *policy_ce when asked.
  Rho1Excess score(const Batch& b, const WeightedMtpLoss& loss, at::Tensor* policy_ce = nullptr) const;
  double scoring_flops(const Batch& b, const WeightedMtpLoss& loss) const;

  Rho1Config cfg_;
  RunContext ctx_;
  int64_t n_future_ = 0;
  StatLayout eval_global_;  // scope global: the selected CE sums finish_eval reduces

  // Validation under global scope: every micro-batch's scores until finish_eval selects.
  std::vector<Rho1Excess> eval_excess_;
  std::vector<at::Tensor> eval_policy_ce_;
};

}  // namespace wmtp
