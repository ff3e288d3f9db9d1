// The critic pipeline (pipelines/critic_pipeline.h).
#include "pipelines/critic_pipeline.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "ckpt/checkpoint.h"
#include "core/config.h"
#include "core/error.h"
#include "core/json.h"
#include "model/mtp.h"
#include "shard/sharded_model.h"
#include "train/flops.h"
#include "train/metrics.h"

namespace wmtp {

namespace {

// One [2B, S] forward: the correct solutions, then the incorrect ones (collate_pairs pads both to
// one S).
struct PairInputs {
  at::Tensor tokens, labels, attention;
};
PairInputs pair_of(const Batch& pos, const Batch& neg) {
  if (!neg.tokens.defined() || neg.tokens.sizes() != pos.tokens.sizes())
    throw_usage("critic: a micro-batch must hold pairs (correct and incorrect solutions of the same shape)");
  return {at::cat({pos.tokens, neg.tokens}, 0), at::cat({pos.labels, neg.labels}, 0),
          at::cat({pos.attention_mask, neg.attention_mask}, 0)};
}

PairInputs pair_inputs(const MicroBatch& mb) { return pair_of(mb.batch, mb.neg); }

// The pairs as collated on the host when the trainer kept them: counts without a device read.
PairInputs pair_inputs_cpu(const MicroBatch& mb) {
  return mb.cpu_batch.labels.defined() && mb.cpu_neg.labels.defined() ? pair_of(mb.cpu_batch, mb.cpu_neg)
                                                                      : pair_inputs(mb);
}

// Model FLOPs per token of the value forward (no output projection). A frozen backbone only runs
// forward (1/3 of the 6N training cost); the value head's own FLOPs are negligible.
double critic_flops_per_token(const ModelArgs& a, bool backbone_trains) {
  const double full = train_flops_per_token(a) - 6.0 * double(a.dim) * double(a.vocab_size);
  return backbone_trains ? full : full / 3.0;
}

void set_metrics(MetricsRecord& rec, const std::string& prefix, const CriticMetrics& m) {
  rec.set(prefix + "mean_pos", m.mean_pos).set(prefix + "mean_neg", m.mean_neg).set(prefix + "margin", m.margin);
  rec.set(prefix + "pos_token_variance", m.pos_token_variance).set(prefix + "neg_token_variance", m.neg_token_variance);
  rec.set(prefix + "pos_spikiness", m.pos_spikiness).set(prefix + "neg_spikiness", m.neg_spikiness);
  rec.set(prefix + "pos_mean_abs_td", m.pos_mean_abs_td).set(prefix + "neg_mean_abs_td", m.neg_mean_abs_td);
  rec.set(prefix + "pos_position_corr", m.pos_position_corr).set(prefix + "neg_position_corr", m.neg_position_corr);
}

// [model] architecture fields a backbone checkpoint already fixes (max_seq_len may still be set).
// [model] may repeat the backbone's architecture (so --dry-run plans before the checkpoint exists);
// what it sets must be what the checkpoint says.
void check_model_section_agrees(const ModelConfig& mc, const ModelArgs& a, const std::string& backbone) {
  if (!mc.params_json.empty())
    throw_usage("[model] params_json: train-critic takes the architecture from the backbone checkpoint ", backbone,
                " ([training] init_weights); leave [model] params_json unset");
  const std::pair<const char*, std::pair<double, double>> set_fields[] = {
      {"dim", {double(mc.dim), double(a.dim)}},
      {"n_layers", {double(mc.n_layers), double(a.n_layers)}},
      {"n_heads", {double(mc.n_heads), double(a.n_heads)}},
      {"n_kv_heads", {double(mc.n_kv_heads), double(a.kv_heads())}},
      {"vocab_size", {double(mc.vocab_size), double(a.vocab_size)}},
      {"multiple_of", {double(mc.multiple_of), double(a.multiple_of)}},
      {"ffn_dim_multiplier", {mc.ffn_dim_multiplier, a.ffn_dim_multiplier.value_or(0.0)}},
      {"norm_eps", {mc.norm_eps, a.norm_eps}},
      {"rope_theta", {mc.rope_theta, a.rope_theta}},
      {"n_future_tokens", {double(mc.n_future_tokens), double(a.n_future_tokens)}}};
  for (const auto& [key, v] : set_fields)
    if (v.first != 0.0 && v.first != v.second)
      throw_usage("[model] ", key, " = ", v.first, " disagrees with the backbone checkpoint ", backbone, " (", key, " ",
                  v.second, "): train-critic takes the architecture from it ([training] init_weights); leave [model] ",
                  key, " unset or equal to the checkpoint's");
}

}  // namespace

ValueHeadConfig CriticConfig::value_head() const {
  ValueHeadConfig vh;
  vh.enabled = true;
  vh.type = value_head_type;
  vh.dropout = value_head_dropout;
  vh.bias_init = value_head_bias_init;
  return vh;
}

ModelArgs value_backbone_args(ModelArgs args) {
  args.n_layers = args.n_trunk_blocks() + 1;
  args.n_future_tokens = 1;
  return args;
}

ParamGroups critic_param_groups(const CriticConfig& c, bool lora) {
  ParamGroups g;
  g.from = "[critic] value_head_lr / value_head_weight_decay / lora_lr / lora_weight_decay";
  if (lora) {
    g.patterns = {"value_head.*", "*.lora_A", "*.lora_B"};
    g.lr = {c.value_head_lr, c.lora_lr, c.lora_lr};
    g.weight_decay = {c.value_head_weight_decay, c.lora_weight_decay, c.lora_weight_decay};
  } else {
    g.patterns = {c.backbone_frozen ? "value_head.*" : "*"};
    g.lr = {c.value_head_lr};
    g.weight_decay = {c.value_head_weight_decay};
  }
  return g;
}

void CriticPipeline::add_config(ConfigSet& set) { set.add("critic", cfg_); }

void CriticPipeline::check(const PipelineSettings& settings) const {
  cfg_.loss.validate();
  if (!(cfg_.value_head_dropout >= 0.0 && cfg_.value_head_dropout < 1.0))
    throw_usage("[critic] value_head_dropout must be in [0, 1), got ", cfg_.value_head_dropout);
  if (!(cfg_.value_head_lr > 0.0)) throw_usage("[critic] value_head_lr must be > 0, got ", cfg_.value_head_lr);
  if (settings.lora.enabled && !(cfg_.lora_lr > 0.0)) throw_usage("[critic] lora_lr must be > 0, got ", cfg_.lora_lr);
}

ParamGroups CriticPipeline::param_groups(const PipelineSettings& settings) const {
  return critic_param_groups(cfg_, settings.lora.enabled);
}

ModelSpec CriticPipeline::trained_model(const PipelineSettings& settings, int64_t data_vocab) const {
  ModelSpec spec;
  spec.role = "critic";
  const std::string& backbone = settings.init_weights;
  if (!backbone.empty()) {
    CheckpointReader r(backbone, MPI_COMM_NULL);
    spec.args = model_args_from_json(json::parse(r.header().model_args_json), backbone);
    check_model_section_agrees(settings.model, spec.args, backbone);
    if (settings.model.max_seq_len > 0) spec.args.max_seq_len = settings.model.max_seq_len;
    if (data_vocab > spec.args.vocab_size)
      throw_usage("backbone ", backbone, ": vocabulary ", spec.args.vocab_size,
                  " is smaller than the training data's tokenizer (", data_vocab, ")");
  } else {
    spec.args = policy_model_args(settings.model, data_vocab);
  }
  spec.args = value_backbone_args(spec.args);
  spec.lora = settings.lora;
  spec.value_head = cfg_.value_head();
  spec.freeze_base = !settings.lora.enabled && cfg_.backbone_frozen;
  spec.weights = backbone;
  return spec;
}

void CriticPipeline::attach(const RunContext& ctx) {
  ctx_ = ctx;
  const ModelSpec& spec = ctx.trained->spec;
  // Recomputing blocks that have nothing to train (a frozen backbone) would only cost time.
  checkpointing_ = ctx.settings.model.activation_checkpointing && (spec.lora.enabled || !spec.freeze_base);
  // Step statistics (train/named_stats.h). training: the micro-batch's share of the step loss and the
  // metric sums; validation: the loss terms summed (pairwise, λ pos, λ neg), the counts {pairs, pos
  // sequences, neg sequences} and the metric sums.
  train_stats_ = StatLayout();
  train_stats_.sum("loss").sum("metric_sums", kCriticMetricSums);
  eval_stats_ = StatLayout();
  eval_stats_.sum("pairwise").sum("lambda_pos").sum("lambda_neg").sum("counts", kCriticCounts);
  eval_stats_.sum("metric_sums", kCriticMetricSums);
}

// No token weights; each micro-batch's {pairs, pos sequences, neg sequences} as its counts, on the
// host, where the loss branches on them.
StepPlan CriticPipeline::begin_step(const StepContext&, const std::vector<MicroBatch>& mbs) {
  StepPlan plan;
  plan.micro_batches.resize(mbs.size());
  plan.counts = at::zeros({int64_t(mbs.size()), kCriticCounts}, at::kDouble);
  for (size_t m = 0; m < mbs.size(); ++m)
    plan.counts[int64_t(m)].copy_(at::tensor(critic_local_counts(pair_inputs_cpu(mbs[m]).labels), at::kDouble));
  return plan;
}

NamedStats CriticPipeline::forward_backward(const StepContext& step_ctx, const MicroBatch& mb, const MicroBatchPlan&,
                                            const at::Tensor& step_counts) {
  // On the host, where begin_step counted them: reading them waits for no device.
  WMTP_CHECK(step_counts.is_cpu(), "critic: the step's counts must stay on the host");
  const at::Tensor c = step_counts.contiguous();
  const std::vector<double> counts(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  const MtpModel& model = *ctx_.trained->model;
  const PairInputs in = pair_inputs(mb);
  c10::AutoGradMode grad_on(true);
  at::Tensor values = model.forward_values(*ctx_.trained->engine, in.tokens, ForwardOptions{true, checkpointing_});
  const double lam = cfg_.loss.pairwise() ? 1.0 : scheduled_lambda(cfg_.loss, step_ctx.step);
  at::Tensor loss = critic_loss(critic_loss_terms(values, in.labels, in.attention, cfg_.loss, lam), cfg_.loss, counts);
  // The counts are global, so whether the loss has a graph is the same on every rank.
  if (loss.requires_grad()) loss.backward();

  // Left on the device: the step reads them with its other statistics at once.
  NamedStats st = train_stats_.make();
  st.set("loss", loss.detach().reshape({1}));
  st.set("metric_sums", critic_metric_sums(values.detach(), in.labels));
  const ModelSpec& spec = ctx_.trained->spec;
  st.tokens = pair_inputs_cpu(mb).attention.sum().item<double>();
  st.flops = st.tokens * critic_flops_per_token(model.args(), spec.lora.enabled || !spec.freeze_base);
  return st;
}

double CriticPipeline::finish_step(const StepContext& step_ctx, const NamedStats& g, MetricsRecord& rec) {
  const double loss = g.get("loss");
  const CriticMetrics m = critic_metrics(g.get_all("metric_sums").data());
  rec.set("train/loss", loss).set("train/pairwise_accuracy", m.pairwise_accuracy);
  if (!cfg_.loss.pairwise()) rec.set("train/lambda", scheduled_lambda(cfg_.loss, step_ctx.step));
  if (!schedule_ || schedule_->total_steps() != step_ctx.total_steps)
    schedule_ = std::make_unique<LrSchedule>(ctx_.settings.lr_schedule, 1.0, step_ctx.total_steps);
  const double factor = schedule_->factor_at(step_ctx.step);
  rec.set("train/value_head_lr", cfg_.value_head_lr * factor);
  if (ctx_.trained->spec.lora.enabled) rec.set("train/lora_lr", cfg_.lora_lr * factor);
  set_metrics(rec, "value/", m);
  return loss;
}

NamedStats CriticPipeline::eval_batch(const MicroBatch& mb) {
  const MtpModel& model = *ctx_.trained->model;
  const PairInputs in = pair_inputs(mb);
  c10::NoGradGuard no_grad;
  at::Tensor values = model.forward_values(*ctx_.trained->engine, in.tokens, ForwardOptions{false, false});
  NamedStats st = eval_stats_.make();
  if (mb.filler) return st;  // ran only to keep the engine's collectives in step
  // Validation always at λ = 1 (Monte-Carlo targets), as weighted_mtp.
  const CriticLossTerms t = critic_loss_terms(values, in.labels, in.attention, cfg_.loss, 1.0);
  if (cfg_.loss.pairwise()) {
    st.set("pairwise", t.pairwise.reshape({1}));
  } else {
    st.set("lambda_pos", t.lambda_pos.reshape({1}));
    st.set("lambda_neg", t.lambda_neg.reshape({1}));
  }
  const PairInputs cpu_pair = pair_inputs_cpu(mb);
  st.set("counts", critic_local_counts(cpu_pair.labels));
  st.set("metric_sums", critic_metric_sums(values, in.labels));
  st.tokens = cpu_pair.attention.sum().item<double>();
  return st;
}

double CriticPipeline::finish_eval(const NamedStats& g, MetricsRecord& rec) {
  CriticLossTerms t;
  t.pairwise = at::scalar_tensor(g.get("pairwise"), at::kDouble);
  t.lambda_pos = at::scalar_tensor(g.get("lambda_pos"), at::kDouble);
  t.lambda_neg = at::scalar_tensor(g.get("lambda_neg"), at::kDouble);
  const double loss = critic_loss(t, cfg_.loss, g.get_all("counts")).item<double>();
  const CriticMetrics m = critic_metrics(g.get_all("metric_sums").data());
  rec.set("val/loss", loss).set("val/pairwise_accuracy", m.pairwise_accuracy);
  set_metrics(rec, "val/", m);
  return loss;
}

}  // namespace wmtp
