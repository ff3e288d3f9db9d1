// train-rho1's token weighting (pipelines/rho1_pipeline.h).
#include "pipelines/rho1_pipeline.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "comm/communicator.h"
#include "core/config.h"
#include "core/error.h"
#include "core/labels.h"
#include "core/log.h"
#include "model/mtp.h"
#include "pipelines/weighted_mtp_loss.h"
#include "shard/sharded_model.h"
#include "train/flops.h"
#include "train/metrics.h"
#include "train/run_models.h"
#include "train/train_step.h"

namespace wmtp {

namespace {

at::Tensor head_sums(const at::Tensor& t) { return t.to(at::kDouble).sum(at::IntArrayRef{0, 1}); }  // [B, S, K] -> [K]

std::vector<double> per_head_sums(const at::Tensor& t) {  // validation: [B, S, K] -> K doubles
  at::Tensor s = head_sums(t).cpu();
  return std::vector<double>(s.data_ptr<double>(), s.data_ptr<double>() + s.numel());
}

double safe_div(double a, double b) { return b > 0 ? a / b : 0.0; }

// [rho1] reference may name a checkpoint file or a run's checkpoint directory (its `latest`). What
// this rank's file system shows: Local errors (frozen_models runs inside agreed()).
std::string reference_file(const std::string& path) {
  if (!std::filesystem::exists(path)) throw_input("[rho1] reference ", path, ": no such checkpoint file or directory");
  return resolve_checkpoint_file(path, "[rho1] reference");
}

}  // namespace

void Rho1Weighting::add_config(ConfigSet& set) { set.add("rho1", cfg_); }

void Rho1Weighting::check(const PipelineSettings&) const { validate_rho1_config(cfg_); }

// The reference must read the policy's token ids the same way: same vocabulary, same tokenizer
// (when its checkpoint says which), one next-token head, a context at least the policy's.
std::vector<ModelSpec> Rho1Weighting::frozen_models(const PipelineSettings& settings, int64_t data_vocab) const {
  validate_rho1_config(cfg_);
  const std::string path = reference_file(cfg_.reference);
  ModelSpec ref = model_spec_from_checkpoint("reference", path);
  ref.weights_key = "rho1.reference";
  ref.override_key = "rho1.resume_with_other_reference";
  ref.allow_other_weights = cfg_.resume_with_other_reference;
  const ModelArgs policy = policy_model_args(settings.model, data_vocab);
  if (ref.value_head.enabled)
    throw_input("[rho1] reference ", path,
                " is a value model (critic); the reference must be a language model (a "
                "value head and no output layer give no token probabilities): train one with train-baseline --set "
                "model.n_future_tokens=1 on correct solutions, or import an HF/Meta LLaMA");
  if (ref.args.n_future_tokens != 1)
    throw_input("[rho1] reference ", path, " has n_future_tokens = ", ref.args.n_future_tokens,
                "; the reference must be a next-token model (n_future_tokens = 1): train one with train-baseline "
                "--set model.n_future_tokens=1 on correct solutions, or import an HF/Meta LLaMA");
  if (ref.args.vocab_size != policy.vocab_size)
    throw_input("[rho1] reference ", path, " has vocab_size ", ref.args.vocab_size, " but the policy has ",
                policy.vocab_size, ": the two models must share one tokenizer");
  if (ref.args.max_seq_len < policy.max_seq_len)
    throw_input("[rho1] reference ", path, " has max_seq_len ", ref.args.max_seq_len, ", shorter than the policy's ",
                policy.max_seq_len);
  if (!settings.train_data.empty()) ref.note = check_frozen_tokenizer("[rho1] reference", path, settings.train_data);
  return {ref};
}

void Rho1Weighting::attach(const RunContext& ctx, WeightedMtpLoss& loss) {
  WMTP_CHECK(ctx.frozen.size() == 1, "rho1 expects one frozen model, got ", ctx.frozen.size());
  ctx_ = ctx;
  n_future_ = loss.n_future();
  const size_t K = size_t(n_future_);
  loss.train_stats().sum("selected", K).sum("excess_sum", K).sum("valid_labels");
  if (cfg_.scope == Rho1Scope::Global) loss.train_stats().max("threshold", K);
  loss.eval_stats().sum("selected_ce_sum", K).sum("selected", K).sum("excess_sum", K);
  eval_global_ = StatLayout();
  eval_global_.sum("selected_ce_sum", K);
  const std::string& note = ctx.frozen.front()->spec.note;
  if (!note.empty() && ctx.log) ctx.log->warn("%s", note.c_str());
  if (ctx.log)
    ctx.log->info("rho1: mode %s, k_percent %g, scope %s, normalization %s",
                  choice_name(kExcessModeNames, cfg_.mode).c_str(), cfg_.k_percent,
                  choice_name(kRho1ScopeNames, cfg_.scope).c_str(),
                  choice_name(kRho1NormalizationNames, cfg_.normalization).c_str());
}

Rho1Excess Rho1Weighting::score(const Batch& b, const WeightedMtpLoss& loss, at::Tensor* policy_ce_out) const {
  MtpPassOptions o = loss.pass_options();
  o.training = false;  // the selection reads the model, not a dropout sample of it
  o.activation_checkpointing = false;
  const MtpBatch mb{b.tokens, b.labels, {}};
  const ModelHandle& ref = *ctx_.frozen.front();
  at::Tensor ref_ce = mtp_token_ce(*ref.model, *ref.engine, mb, o);
  at::Tensor policy_ce = mtp_token_ce(*loss.policy().model, *loss.policy().engine, mb, o);
  if (policy_ce_out) *policy_ce_out = policy_ce;
  return rho1_excess_loss(policy_ce, ref_ce, b.labels, cfg_.mode);
}

// Two forwards (reference, policy) at a third of a training step's FLOPs each.
double Rho1Weighting::scoring_flops(const Batch& b, const WeightedMtpLoss& loss) const {
  const double tokens = b.attention_mask.sum().item<double>();
  return tokens *
         (train_flops_per_token(ctx_.frozen.front()->spec.args) + train_flops_per_token(loss.policy().spec.args)) / 3.0;
}

StepPlan Rho1Weighting::plan_step(const StepContext&, const std::vector<MicroBatch>& mbs, const WeightedMtpLoss& loss) {
  std::vector<Rho1Excess> ex;
  ex.reserve(mbs.size());
  for (const auto& mb : mbs) ex.push_back(score(mb.batch, loss));
  const bool global = cfg_.scope == Rho1Scope::Global;
  Rho1Selection sel = global ? rho1_select_global(ex, n_future_, cfg_.k_percent, ctx_.comm)
                             : rho1_select_local(ex, cfg_.k_percent);
  StepPlan plan = loss.plan(mbs);  // counts: the valid targets per head
  // Every figure stays on the device until the step reads its statistics once (train_step).
  std::vector<at::Tensor> selected;
  for (size_t i = 0; i < mbs.size(); ++i) {
    const Batch& cpu_batch = WeightedMtpLoss::cpu_or_device(mbs[i]);
    MicroBatchPlan& p = plan.micro_batches[i];
    p.weights = sel.weights[i];
    selected.push_back(head_sums(sel.weights[i]));
    p.prepared = loss.train_stats().make();
    p.prepared.set("selected", selected.back());
    p.prepared.set("excess_sum", head_sums(ex[i].excess));
    p.prepared.set("valid_labels", cpu_batch.labels.ne(kIgnoreIndex).sum().item<double>());
    if (global) p.prepared.set("threshold", sel.threshold);
    p.prepared.flops = scoring_flops(cpu_batch, loss);
  }
  // "selected": each head normalized by the tokens selected, counted on the device.
  if (cfg_.normalization == Rho1Normalization::Selected) plan.counts = at::stack(selected);
  return plan;
}

void Rho1Weighting::finish_step(const StepContext&, const NamedStats& g, double loss, MetricsRecord& rec) {
  const int64_t K = n_future_;
  double unweighted = 0, selected = 0, valid = 0, excess = 0;
  int64_t heads = 0;
  for (int64_t k = 0; k < K; ++k) {
    const size_t h = size_t(k);
    const double n = g.get("count", h), sel = g.get("selected", h), ex = g.get("excess_sum", h);
    if (n > 0) unweighted += g.get("unweighted_sum", h) / n, ++heads;
    selected += sel, valid += n, excess += ex;
    rec.set("train/selection_ratio_head_" + std::to_string(k), safe_div(sel, n));
    rec.set("train/excess_loss_head_" + std::to_string(k), safe_div(ex, n));
    if (cfg_.scope == Rho1Scope::Global) rec.set("train/threshold_head_" + std::to_string(k), g.get("threshold", h));
  }
  const double ratio = safe_div(selected, valid);
  rec.set("train/weighted_ce_loss", loss);  // the step loss: selected CE / the normalization counts
  rec.set("train/unweighted_ce_loss", heads ? unweighted / double(heads) : 0.0);
  rec.set("train/selection_ratio", ratio);
  rec.set("train/avg_heads_per_pos", safe_div(selected, g.get("valid_labels")));
  rec.set("train/excess_loss", safe_div(excess, valid));
  // Binary weights over the step's valid (head, position) tokens: mean = selection ratio, sample
  // std, and entropy -mean(w ln w) = 0 (reported for parity with the other pipelines' weight/*).
  rec.set("weight/mean", ratio);
  rec.set("weight/std", valid > 1 ? std::sqrt(ratio * (1 - ratio) * valid / (valid - 1)) : 0.0);
  rec.set("weight/min", valid > 0 && selected < valid ? 0.0 : 1.0);
  rec.set("weight/max", selected > 0 ? 1.0 : 0.0);
  rec.set("weight/entropy", 0.0);
}

NamedStats Rho1Weighting::eval_batch(const MicroBatch& mb, const WeightedMtpLoss& loss) {
  at::Tensor ce;  // 0 where no valid target
  Rho1Excess ex = score(mb.batch, loss, &ce);

  NamedStats st = loss.eval_stats().make();
  st.set("unweighted_sum", per_head_sums(ce));
  st.set("count", per_head_sums(ex.valid));
  st.set("excess_sum", per_head_sums(ex.excess));
  if (cfg_.scope == Rho1Scope::Local) {
    at::Tensor w = rho1_select_local({ex}, cfg_.k_percent).weights.front();
    st.set("selected_ce_sum", per_head_sums(ce * w));
    st.set("selected", per_head_sums(w));
  } else {
    eval_excess_.push_back(ex);
    eval_policy_ce_.push_back(ce);
  }
  return st;
}

double Rho1Weighting::finish_eval(const NamedStats& g, double, MetricsRecord& rec) {
  const int64_t K = n_future_;
  std::vector<double> wsum = g.get_all("selected_ce_sum"), nsel = g.get_all("selected");
  if (cfg_.scope == Rho1Scope::Global) {
    // One selection over the whole validation set, as one process would make it.
    Rho1Selection sel = rho1_select_global(eval_excess_, K, cfg_.k_percent, ctx_.comm);
    NamedStats local = eval_global_.make();
    for (size_t i = 0; i < eval_excess_.size(); ++i) {
      NamedStats one = eval_global_.make();
      one.set("selected_ce_sum", per_head_sums(eval_policy_ce_[i] * sel.weights[i]));
      local.accumulate(one);
    }
    wsum = reduce_stats(*ctx_.comm, local).get_all("selected_ce_sum");
    const std::vector<Rho1HeadSelection> heads = sel.read_heads();
    for (int64_t k = 0; k < K; ++k) nsel[size_t(k)] = double(heads[size_t(k)].selected);  // already global
    eval_excess_.clear();
    eval_policy_ce_.clear();
  }
  // The reference's validate_rho1 definitions, over tokens instead of per-batch means: weighted =
  // mean over heads with selections of (selected CE / selected tokens); unweighted = sum over heads
  // of the head's mean CE / n_future; head 0's mean CE; mean excess over all valid tokens.
  double weighted = 0, unweighted = 0, excess = 0, valid = 0;
  int64_t with_sel = 0;
  for (int64_t k = 0; k < K; ++k) {
    const size_t h = size_t(k);
    const double n = g.get("count", h), ex = g.get("excess_sum", h);
    if (nsel[h] > 0) weighted += wsum[h] / nsel[h], ++with_sel;
    unweighted += safe_div(g.get("unweighted_sum", h), n);
    excess += ex, valid += n;
    rec.set("val/excess_loss_head_" + std::to_string(k), safe_div(ex, n));
  }
  unweighted /= double(K);
  rec.set("val/weighted_ce_loss", with_sel ? weighted / double(with_sel) : 0.0);
  rec.set("val/unweighted_ce_loss", unweighted);
  rec.set("val/head0_ce_loss", safe_div(g.get("unweighted_sum", 0), g.get("count", 0)));
  rec.set("val/excess_loss", safe_div(excess, valid));
  return unweighted;
}

}  // namespace wmtp
