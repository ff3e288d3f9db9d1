// VerifiablePipeline (train-verifiable): the MTP policy (full or LoRA) trained with per-token weights
// from a frozen critic (docs/verifiable.md). The critic is a train-critic
// checkpoint (backbone + value head, its LoRA adapters applied), sharded through the engine as a
// frozen model beside the policy. It must have been trained on data of the policy's tokenizer (its
// checkpoint's tokenizer fingerprint), and checkpoints record it (file, fingerprint): a resume with
// another critic is refused unless [verifiable] resume_with_other_critic.
//
//   data        pointwise: the sampler's pointwise items are exactly the correct sample of each
//               selected pair, which is what the original trained on (its pairwise loader, negatives
//               ignored), so negatives are never loaded
//   begin_step  per micro-batch, no grad: critic values -> GAE -> weights whitened by the EMA's
//               statistics, fixed for the whole accumulation window (losses/verifiable.h); the
//               weights ride in MicroBatch::weights as [B, S] position weights, the micro-batch's
//               TdSums in MicroBatch::prepared
//   step        MtpPolicyPipeline's weighted MTP CE, normalised by the step's global valid counts;
//               the micro-batch's TdSums are reported with its NamedStats, so the trainer's one
//               reduction yields the exact step metrics and the EMA's inputs
//   finish_step metrics (train/weighted_ce_loss, train/unweighted_ce_loss, train/loss_ratio, td/*,
//               value/mse, weight/*), then the EMA update from the global sums (td/ema_* report the
//               statistics after the update)
//   validation  weights from the micro-batch's own statistics (mean, unbiased std), as the
//               original; val/weighted_ce_loss, val/unweighted_ce_loss (= val/loss, the lower-is-
//               better validation loss)
//   state       the EMA (mean, std, step count) in /train of every checkpoint, restored on resume
#pragma once
#include <string>
#include <vector>

#include "pipelines/losses/verifiable.h"
#include "pipelines/mtp_pipeline.h"

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

class VerifiablePipeline final : public MtpPolicyPipeline {
 public:
  static constexpr const char* kEmaKey = "verifiable.td_ema";  // /train keys <kEmaKey>.{mean,std,step_count}

  VerifiablePipeline();
  std::string name() const override { return "verifiable"; }
  void add_config(ConfigSet& set) override;
  void check(const PipelineSettings& settings) const override;
  std::vector<ModelSpec> frozen_models(const PipelineSettings& settings, int64_t data_vocab) const override;
  void attach(const RunContext& ctx) override;

  void begin_step(const StepContext& info, std::vector<MicroBatch>& mbs) override;
  NamedStats forward_backward(const StepContext& info, const MicroBatch& mb, const std::vector<double>& counts) override;
  double finish_step(const StepContext& info, const NamedStats& global, MetricsRecord& rec) override;

  NamedStats eval_batch(const MicroBatch& mb) override;
  double finish_eval(const NamedStats& global, MetricsRecord& rec) override;

  void save_state(TrainState& st) const override;
  std::vector<std::string> load_state(const TrainState& st, const std::string& checkpoint) override;

  const TdStatsEma& ema() const { return ema_; }

 private:
  at::Tensor critic_values(const at::Tensor& tokens) const;  // [B, S], no grad
  std::string critic_path() const;  // [verifiable] critic, a directory resolved to its `latest`

  VerifiableConfig cfg_;
  TdStatsEma ema_;
  ModelHandle* critic_ = nullptr;
};

}  // namespace wmtp
