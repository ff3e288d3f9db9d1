// VerifiableWeighting: train-verifiable (docs/verifiable.md), the MTP policy pipeline
// (pipelines/mtp_pipeline.h; full or LoRA) with per-token weights from a frozen critic. The critic is a train-critic
// checkpoint (backbone + value head, its LoRA adapters applied), sharded through the engine as a
// frozen model beside the policy. It must have been trained on data of the policy's tokenizer (its
// checkpoint's tokenizer fingerprint), and checkpoints record it (file, fingerprint): a resume with
// another critic is refused unless [verifiable] resume_with_other_critic.
//
//   data        pointwise: the sampler's pointwise items are exactly the correct sample of each
//               selected pair, which is what weighted_mtp trained on (its pairwise loader, negatives
//               ignored), so negatives are never loaded
//   plan_step   per micro-batch, no grad: critic values -> GAE -> weights whitened by the EMA's
//               statistics, fixed for the whole accumulation window (losses/verifiable.h); the plan
//               holds them as [B, S] position weights, the micro-batch's TdSums as its prepared
//               statistics, and the valid targets per head as its counts
//   step        the weighted MTP CE (pipelines/weighted_mtp_loss.h), normalized by the step's global
//               valid counts; the micro-batch's TdSums are reported with its NamedStats, so the
//               trainer's one reduction yields the exact step metrics and the EMA's inputs
//   finish_step metrics (train/weighted_ce_loss, train/unweighted_ce_loss, train/loss_ratio, td/*,
//               value/mse, weight/*), then the EMA update from the global sums (td/ema_* report the
//               statistics after the update)
//   validation  weights from the micro-batch's own statistics (mean, unbiased std), as the
//               original; val/weighted_ce_loss, val/unweighted_ce_loss (= val/loss, the lower-is-
//               better validation loss)
//   state       the EMA (mean, std, step count) in /train of every checkpoint (train_keys::kTdEma),
//               restored on resume
#pragma once
#include <string>
#include <vector>

#include "pipelines/losses/verifiable.h"
#include "pipelines/token_weighting.h"

namespace wmtp {

// [verifiable]
struct VerifiableConfig {
  std::string critic;  // train-critic checkpoint (full or adapters-only), or its checkpoint directory
  bool resume_with_other_critic = false;
  TdWeightConfig weights;
  template <class V>
  void visit(V& v) {
    v.field("critic", critic,
            "train-critic checkpoint (.h5) whose value head weighs the tokens, or a train-critic checkpoint "
            "directory (the file its `latest` names); an adapters-only checkpoint is loaded on the base it records");
    v.field("resume_with_other_critic", resume_with_other_critic,
            "resume even if `critic` now gives other weights than the run's checkpoint records (a directory "
            "whose `latest` moved on, a replaced file); false: such a resume is refused (exit 2), since the rest "
            "of the run would be weighed by another critic");
    weights.visit(v);
  }
};

class VerifiableWeighting final : public TokenWeighting {
 public:
  VerifiableWeighting();
  std::string name() const override { return "verifiable"; }
  void add_config(ConfigSet& set) override;
  void check(const PipelineSettings& settings) const override;
  std::vector<ModelSpec> frozen_models(const PipelineSettings& settings, int64_t data_vocab) const override;
  void attach(const RunContext& ctx, WeightedMtpLoss& loss) override;

  StepPlan plan_step(const StepContext& step_ctx, const std::vector<MicroBatch>& mbs,
                     const WeightedMtpLoss& loss) override;
  void finish_step(const StepContext& step_ctx, const NamedStats& global, double loss, MetricsRecord& rec) override;

  NamedStats eval_batch(const MicroBatch& mb, const WeightedMtpLoss& loss) override;
  double finish_eval(const NamedStats& global, double loss, MetricsRecord& rec) override;

  void save_state(TrainState& st) const override;
  std::vector<std::string> check_state(const TrainState& st, const CheckpointReader& file) const override;
  void load_state(const TrainState& st, const CheckpointReader& file) override;

  const TdStatsEma& ema() const { return ema_; }

 private:
  at::Tensor critic_values(const at::Tensor& tokens) const;  // [B, S], no grad
  std::string critic_path() const;  // [verifiable] critic, a directory resolved to its `latest`

  VerifiableConfig cfg_;
  TdStatsEma ema_;
  ModelHandle* critic_ = nullptr;
};

}  // namespace wmtp
