// train-verifiable's token weighting (pipelines/verifiable_pipeline.h).
#include "pipelines/verifiable_pipeline.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/train_keys.h"
#include "ckpt/train_state.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "model/mtp.h"
#include "model/mtp_loss.h"
#include "pipelines/weighted_mtp_loss.h"
#include "shard/sharded_model.h"
#include "train/flops.h"
#include "train/metrics.h"
#include "train/run_models.h"

namespace wmtp {

namespace {
// Forward-only FLOPs of the critic per token: a third of the training FLOPs of its backbone (one
// head, no output projection: a value model has none) — the value head's are negligible.
double critic_flops_per_token(const ModelArgs& a) {
  ModelArgs one = a;
  one.n_future_tokens = 1;
  return (train_flops_per_token(one) - 6.0 * double(a.dim) * double(a.vocab_size)) / 3.0;
}
}  // namespace

VerifiableWeighting::VerifiableWeighting() : ema_(cfg_.weights.td_ema_momentum, cfg_.weights.td_ema_warmup_steps) {}

void VerifiableWeighting::add_config(ConfigSet& set) { set.add("verifiable", cfg_); }

void VerifiableWeighting::check(const PipelineSettings&) const {
  cfg_.weights.validate();
  if (cfg_.critic.empty())
    throw_usage("[verifiable] critic: required: the train-critic checkpoint whose values weigh the tokens");
}

std::string VerifiableWeighting::critic_path() const {
  // A run's checkpoint directory resolves to the checkpoint its `latest` names. What this rank's file
  // system shows: Local errors (frozen_models runs inside agreed()).
  if (!std::filesystem::exists(cfg_.critic))
    throw_input("[verifiable] critic = ", cfg_.critic, ": no such checkpoint file or directory");
  return resolve_checkpoint_file(cfg_.critic, "[verifiable] critic");
}

std::vector<ModelSpec> VerifiableWeighting::frozen_models(const PipelineSettings& settings, int64_t data_vocab) const {
  const std::string path = critic_path();
  ModelSpec spec = model_spec_from_checkpoint("critic", path);
  if (!spec.value_head.enabled)
    throw_input("[verifiable] critic = ", path,
                ": the checkpoint has no value head (expected a train-critic "
                "checkpoint)");
  // As for the policy: a larger vocabulary is fine (padded tables), a smaller one cannot read the data.
  if (spec.args.vocab_size < data_vocab)
    throw_input("[verifiable] critic = ", path, ": vocabulary ", spec.args.vocab_size,
                " is smaller than the training data's tokenizer (", data_vocab,
                "): the critic must read the same tokens as the policy");
  // The same vocabulary size is not the same tokenizer: the critic's checkpoint says which one.
  if (!settings.train_data.empty())
    spec.note = check_frozen_tokenizer("[verifiable] critic", path, settings.train_data);
  spec.frozen = true;
  spec.weights = path;
  spec.weights_key = "verifiable.critic";
  spec.override_key = "verifiable.resume_with_other_critic";
  spec.allow_other_weights = cfg_.resume_with_other_critic;
  return {spec};
}

void VerifiableWeighting::attach(const RunContext& ctx, WeightedMtpLoss& loss) {
  if (ctx.frozen.size() != 1) throw_runtime("train-verifiable: expected one frozen model (the critic)");
  critic_ = ctx.frozen[0];
  if (!critic_->spec.note.empty() && ctx.log) ctx.log->warn("%s", critic_->spec.note.c_str());
  ema_ = TdStatsEma(cfg_.weights.td_ema_momentum, cfg_.weights.td_ema_warmup_steps);
  // The micro-batch's TdSums ride with the policy's statistics.
  loss.train_stats().sum("td_sums", TdSums::kSums).max("td_maxes", TdSums::kMaxes);
}

at::Tensor VerifiableWeighting::critic_values(const at::Tensor& tokens) const {
  c10::NoGradGuard no_grad;
  ForwardOptions fo;
  fo.training = false;  // weighted_mtp's critic is in eval mode: no dropout
  return critic_->model->forward_values(*critic_->engine, tokens, fo);
}

StepPlan VerifiableWeighting::plan_step(const StepContext&, const std::vector<MicroBatch>& mbs,
                                        const WeightedMtpLoss& loss) {
  // Every micro-batch of the window is weighed with the same statistics (the EMA moves only in
  // finish_step), so computing them all before the first backward changes nothing but memory.
  const WhiteningStats stats = ema_.stats();
  const double critic_flops = critic_flops_per_token(critic_->model->args());
  StepPlan plan = loss.plan(mbs);  // counts: the valid targets per head
  for (size_t i = 0; i < mbs.size(); ++i) {
    const MicroBatch& mb = mbs[i];
    // On the device, GAE included (losses/verifiable.h): the sums are read with the step's statistics.
    TokenWeights w = verifiable_weights(critic_values(mb.batch.tokens), mb.batch.labels, cfg_.weights, stats);
    MicroBatchPlan& p = plan.micro_batches[i];
    p.weights = w.weights;
    p.prepared = loss.train_stats().make();
    p.prepared.set("td_sums", w.sums);
    p.prepared.set("td_maxes", w.maxes);
    p.prepared.flops = WeightedMtpLoss::cpu_or_device(mb).attention_mask.sum().item<double>() * critic_flops;
  }
  return plan;
}

namespace {
// mean over heads with tokens of sums[k] / counts[k]
double head_mean(const NamedStats& g, const char* sums, const char* counts) {
  const std::vector<double> s = g.get_all(sums), c = g.get_all(counts);
  double total = 0;
  int n = 0;
  for (size_t k = 0; k < s.size(); ++k)
    if (c[k] > 0) total += s[k] / c[k], ++n;
  return n ? total / n : 0.0;
}
}  // namespace

void VerifiableWeighting::finish_step(const StepContext&, const NamedStats& g, double loss, MetricsRecord& rec) {
  // Under global normalization the loss is mean_k sum(ce*w*m)/count_k over the whole step; the
  // unweighted CE is the same with w = 1.
  const double unweighted = head_mean(g, "unweighted_sum", "count");
  rec.set("train/weighted_ce_loss", loss);
  rec.set("train/unweighted_ce_loss", unweighted);
  rec.set("train/loss_ratio", unweighted != 0 ? loss / unweighted : 0.0);

  const TdSums s = TdSums::read(g.get_all("td_sums"), 0, g.get_all("td_maxes"), 0);
  const TdMetrics m = td_metrics(s);
  ema_.update(s.adv_sum, s.adv_sumsq, s.count);
  rec.set("td/mean", m.td_mean);
  rec.set("td/std", m.td_std);
  rec.set("td/ema_mean", ema_.stats().mean);
  rec.set("td/ema_std", ema_.stats().std);
  rec.set("value/mse", m.value_mse);
  rec.set("weight/mean", m.weight_mean);
  rec.set("weight/std", m.weight_std);
  rec.set("weight/min", m.weight_min);
  rec.set("weight/max", m.weight_max);
  rec.set("weight/entropy", m.weight_entropy);
  rec.set("weight/clipping_ratio", m.clipping_ratio);
}

// Validation statistics: the loss's, with the weights of the micro-batch's own statistics.
NamedStats VerifiableWeighting::eval_batch(const MicroBatch& mb, const WeightedMtpLoss& loss) {
  // Filler batches still run the critic: its engine's gathers must stay in step across ranks.
  TokenWeights w = verifiable_weights(critic_values(mb.batch.tokens), mb.batch.labels, cfg_.weights, std::nullopt);
  return loss.eval(mb, w.weights);
}

double VerifiableWeighting::finish_eval(const NamedStats& g, double unweighted, MetricsRecord& rec) {
  rec.set("val/weighted_ce_loss", head_mean(g, "weighted_sum", "count"));
  rec.set("val/unweighted_ce_loss", unweighted);
  return unweighted;
}

void VerifiableWeighting::save_state(TrainState& st) const { ema_.save(st, train_keys::kTdEma); }

std::vector<std::string> VerifiableWeighting::check_state(const TrainState& st, const CheckpointReader& file) const {
  using namespace train_keys;
  // Every rank read the same /train, so a missing key is the same verdict everywhere.
  require_train_keys(st, file,
                     {std::string(kTdEma) + kTdEmaMean, std::string(kTdEma) + kTdEmaStd,
                      std::string(kTdEma) + kTdEmaStepCount},
                     " (the TD EMA every train-verifiable checkpoint holds); resuming without it would whiten the "
                     "weights with other statistics than the interrupted run");
  return {};
}

void VerifiableWeighting::load_state(const TrainState& st, const CheckpointReader&) {
  ema_.load(st, train_keys::kTdEma);
}

}  // namespace wmtp
