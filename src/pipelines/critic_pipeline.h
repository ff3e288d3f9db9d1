// CriticPipeline: train-critic (docs/critic.md). A value model — an
// n_future = 1 LLaMA backbone whose final-normed hidden state feeds a value head (model/value_head.h)
// — trained on pairs (correct, incorrect solution of one problem). Each micro-batch runs pos and neg
// as ONE [2B, S] forward; the loss is Bradley–Terry on mean solution values or λ-return regression
// (pipelines/losses/critic_loss.h), normalized by the step's global pair / sequence counts.
//
// Backbone ([training] init_weights): an imported NTP LLaMA (convert-checkpoint import, HF or Meta)
// or any MTP checkpoint, of which the trunk + head 0 is used — the n_future = 1 model with n_layers =
// n_trunk + 1 has exactly the names layers.0..n_trunk; extra_heads.* and output.weight are not read.
// Without init_weights the backbone is [model] (trunk + head 0) at its seeded init. Training:
//   [lora] enabled        LoRA adapters (group lora_lr / lora_weight_decay) + value head
//   backbone_frozen=true  value head only (the backbone costs no gradient or optimizer state)
//   backbone_frozen=false every parameter, one group at value_head_lr (weighted_mtp's choice)
// param_groups() declares these groups (the trainer writes them into [optimizer] group_patterns;
// first match wins); nothing is left in the default group, so [optimizer] lr only names the schedule's peak in the logs.
// Validation always uses λ = 1. Metrics use the reference's names (train/pairwise_accuracy,
// train/lambda, value/{mean_pos, mean_neg, margin, pos_/neg_token_variance, pos_/neg_spikiness,
// pos_/neg_mean_abs_td, pos_/neg_position_corr}, val/*), computed from sums over the whole step.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/model_args.h"
#include "model/value_head.h"
#include "pipelines/losses/critic_loss.h"
#include "train/lr_schedule.h"
#include "train/pipeline.h"

namespace wmtp {

// The [critic] table: the loss (CriticLossConfig's keys) and how the model trains.
struct CriticConfig {
  CriticLossConfig loss;
  bool backbone_frozen = true;  // without LoRA: train the value head only
  ValueHeadType value_head_type = ValueHeadType::Mlp;
  double value_head_dropout = 0.2;
  double value_head_bias_init = 0.0;
  double value_head_lr = 1e-4;
  double value_head_weight_decay = 0.01;
  double lora_lr = 2e-5;
  double lora_weight_decay = 0.01;

  template <class V>
  void visit(V& v) {
    loss.visit(v);
    v.field("backbone_frozen", backbone_frozen,
            "without [lora]: true = train the value head only, false = train every parameter");
    v.choice("value_head_type", value_head_type, kValueHeadTypeNames,
             "mlp: H -> H/4 -> GELU -> dropout -> H/8 -> GELU -> dropout -> 1; linear: H -> 1");
    v.field("value_head_dropout", value_head_dropout, "dropout between the mlp layers");
    v.field("value_head_bias_init", value_head_bias_init, "last layer's bias at init (= the initial value)");
    v.field("value_head_lr", value_head_lr, "peak learning rate of the value head (all parameters when fully trained)");
    v.field("value_head_weight_decay", value_head_weight_decay, "weight decay of the value head");
    v.field("lora_lr", lora_lr, "peak learning rate of the LoRA adapters");
    v.field("lora_weight_decay", lora_weight_decay, "weight decay of the LoRA adapters");
  }
  ValueHeadConfig value_head() const;
};

// Trunk + head 0 of `args` as an n_future = 1 model (unchanged when n_future is already 1).
ModelArgs value_backbone_args(ModelArgs args);

// The parameter groups of a critic run (patterns, lr, weight decay) with or without LoRA.
ParamGroups critic_param_groups(const CriticConfig& cfg, bool lora);

class CriticPipeline final : public Pipeline {
 public:
  std::string name() const override { return "critic"; }
  void add_config(ConfigSet& set) override;
  void check(const PipelineSettings& settings) const override;
  ParamGroups param_groups(const PipelineSettings& settings) const override;
  BatchKind batch_kind() const override { return BatchKind::Pairwise; }
  ModelSpec trained_model(const PipelineSettings& settings, int64_t data_vocab) const override;
  void attach(const RunContext& ctx) override;

  StepPlan begin_step(const StepContext&, const std::vector<MicroBatch>& mbs) override;
  NamedStats forward_backward(const StepContext& step_ctx, const MicroBatch& mb, const MicroBatchPlan& plan,
                              const at::Tensor& counts) override;
  double finish_step(const StepContext& step_ctx, const NamedStats& global, MetricsRecord& rec) override;
  NamedStats eval_batch(const MicroBatch& mb) override;
  double finish_eval(const NamedStats& global, MetricsRecord& rec) override;

  const CriticConfig& config() const { return cfg_; }
  CriticConfig& config() { return cfg_; }

 private:
  CriticConfig cfg_;
  RunContext ctx_;
  bool checkpointing_ = false;
  StatLayout train_stats_, eval_stats_;   // declared in attach()
  std::unique_ptr<LrSchedule> schedule_;  // the run's schedule shape, for the per-group lr metrics
};

}  // namespace wmtp
