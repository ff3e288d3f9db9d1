// Critic losses (Bradley–Terry, λ-return with MSE/Huber), the λ schedule and the diagnostics.
#include "pipelines/losses/critic_loss.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>

#include "comm/device.h"
#include "core/error.h"
#include "core/labels.h"
#include "pipelines/losses/discounted_sum.h"

namespace wmtp {

namespace {

constexpr double kMeanEps = 1e-8;  // weighted_mtp's denominators: sum(m) + 1e-8

void check_inputs(const at::Tensor& values, const at::Tensor& labels, const at::Tensor* attention_mask) {
  if (!values.defined() || values.dim() != 2) throw_usage("critic loss: values must be [2B, S]");
  if (!labels.defined() || labels.sizes() != values.sizes())
    throw_usage("critic loss: labels must match values ", values.sizes());
  if (values.size(0) % 2 != 0) throw_usage("critic loss: ", values.size(0), " rows is not a whole number of pairs");
  if (attention_mask && (!attention_mask->defined() || attention_mask->sizes() != values.sizes()))
    throw_usage("critic loss: attention_mask must match values ", values.sizes());
}

at::Tensor solution_mask(const at::Tensor& labels, at::ScalarType dtype) { return labels.ne(kIgnoreIndex).to(dtype); }

}  // namespace

void CriticLossConfig::validate() const {
  if (!(coef > 0.0)) throw_usage("[critic] coef must be > 0, got ", coef);
  if (!(gamma > 0.0 && gamma <= 1.0)) throw_usage("[critic] gamma must be in (0, 1], got ", gamma);
  if (!(huber_delta > 0.0)) throw_usage("[critic] huber_delta must be > 0, got ", huber_delta);
  if (!(lambda_start >= 0.0 && lambda_start <= 1.0))
    throw_usage("[critic] lambda_start must be in [0, 1], got ", lambda_start);
  if (!(lambda_end >= 0.0 && lambda_end <= 1.0)) throw_usage("[critic] lambda_end must be in [0, 1], got ", lambda_end);
  if (lambda_warmup_steps < 0) throw_usage("[critic] lambda_warmup_steps must be >= 0, got ", lambda_warmup_steps);
  if (lambda_decay_steps < 0) throw_usage("[critic] lambda_decay_steps must be >= 0, got ", lambda_decay_steps);
}

double scheduled_lambda(const CriticLossConfig& cfg, int64_t step) {
  if (cfg.lambda_schedule == LambdaSchedule::Constant || step < cfg.lambda_warmup_steps) return cfg.lambda_start;
  if (step >= cfg.lambda_warmup_steps + cfg.lambda_decay_steps) return cfg.lambda_end;
  const double progress = double(step - cfg.lambda_warmup_steps) / double(cfg.lambda_decay_steps);
  if (cfg.lambda_schedule == LambdaSchedule::Cosine)
    return cfg.lambda_end + (cfg.lambda_start - cfg.lambda_end) * 0.5 * (1.0 + std::cos(M_PI * progress));
  return cfg.lambda_start - progress * (cfg.lambda_start - cfg.lambda_end);
}

at::Tensor masked_mean_values(const at::Tensor& values, const at::Tensor& labels) {
  at::Tensor v = values.to(at::kFloat);
  at::Tensor m = solution_mask(labels, at::kFloat);
  return (v * m).sum(1) / (m.sum(1) + kMeanEps);
}

at::Tensor lambda_return_targets(const at::Tensor& values, const at::Tensor& labels, const at::Tensor& attention_mask,
                                 const std::vector<double>& rewards, double gamma, double lam) {
  const at::Tensor v = values.detach().to(at::kDouble);
  const int64_t N = v.size(0), S = v.size(1);
  WMTP_CHECK(int64_t(rewards.size()) == N, "lambda_return_targets: ", rewards.size(), " rewards for ", N, " rows");
  const at::Tensor zero = at::zeros({}, v.options());
  // T = the row's last non-padding position: g_T = reward, g_t = (1 - lam) gamma v_{t+1} + lam gamma
  // g_{t+1} below it, 0 past it; rows without a solution token (or without tokens) get no targets.
  const at::Tensor pos = at::arange(S, v.options().dtype(at::kLong)).unsqueeze(0);
  const at::Tensor last =
      at::where(attention_mask.ne(0), pos, at::full({}, int64_t(-1), pos.options())).amax(1, /*keepdim=*/true);
  const at::Tensor next_v = at::constant_pad_nd(v.narrow(1, 1, S - 1), {0, 1});
  const at::Tensor reward = to_device(at::tensor(rewards, at::kDouble), v.device()).unsqueeze(1);
  const at::Tensor c = at::where(pos.lt(last), (1.0 - lam) * gamma * next_v, zero) +
                       at::where(pos.eq(last), reward, zero);
  const at::Tensor has_solution = labels.ne(kIgnoreIndex).any(1, /*keepdim=*/true);
  return at::where(has_solution, reverse_discounted_sum(c, lam * gamma), zero);
}

std::vector<double> critic_local_counts(const at::Tensor& labels) {
  if (!labels.defined() || labels.dim() != 2 || labels.size(0) % 2 != 0)
    throw_usage("critic counts: labels must be [2B, S]");
  const int64_t B = labels.size(0) / 2;
  const at::Tensor has = labels.ne(kIgnoreIndex).any(1).to(at::kLong).cpu();
  return {double(B), double(has.narrow(0, 0, B).sum().item<int64_t>()),
          double(has.narrow(0, B, B).sum().item<int64_t>())};
}

CriticLossTerms critic_loss_terms(const at::Tensor& values, const at::Tensor& labels, const at::Tensor& attention_mask,
                                  const CriticLossConfig& cfg, double lam) {
  check_inputs(values, labels, &attention_mask);
  const int64_t N = values.size(0), B = N / 2;
  CriticLossTerms out;
  if (cfg.pairwise()) {
    at::Tensor vbar = masked_mean_values(values, labels);
    out.pairwise = -at::log_sigmoid(vbar.narrow(0, 0, B) - vbar.narrow(0, B, B)).sum();
    return out;
  }
  std::vector<double> rewards(size_t(N), 0.0);
  std::fill(rewards.begin(), rewards.begin() + B, 1.0);
  at::Tensor targets;
  {
    c10::NoGradGuard no_grad;
    targets =
        lambda_return_targets(values, labels, attention_mask, rewards, cfg.gamma, lam).to(values.device(), at::kFloat);
  }
  at::Tensor v = values.to(at::kFloat);
  at::Tensor token = cfg.loss_fn == CriticTokenLoss::Mse
                         ? (v - targets).pow(2)
                         : at::smooth_l1_loss(v, targets, at::Reduction::None, cfg.huber_delta);
  at::Tensor m = solution_mask(labels, at::kFloat) * attention_mask.ne(0).to(at::kFloat);
  at::Tensor n = m.sum(1);
  // Per-sequence mean; rows without solution tokens contribute 0 (and are not counted).
  at::Tensor per_seq = (token * m).sum(1) / (n + kMeanEps);
  out.lambda_pos = per_seq.narrow(0, 0, B).sum();
  out.lambda_neg = per_seq.narrow(0, B, B).sum();
  return out;
}

at::Tensor critic_loss(const CriticLossTerms& terms, const CriticLossConfig& cfg, const std::vector<double>& counts) {
  if (counts.size() != size_t(kCriticCounts)) throw_usage("critic loss: ", counts.size(), " counts, expected 3");
  if (cfg.pairwise()) {
    WMTP_CHECK(terms.pairwise.defined(), "critic loss: pairwise terms missing");
    if (counts[0] <= 0) return at::zeros({}, terms.pairwise.options()).detach();
    return terms.pairwise * (cfg.coef / counts[0]);
  }
  WMTP_CHECK(terms.lambda_pos.defined() && terms.lambda_neg.defined(), "critic loss: lambda_return terms missing");
  at::Tensor loss = at::zeros({}, terms.lambda_pos.options());
  if (counts[1] > 0) loss = loss + terms.lambda_pos * (cfg.coef / (2.0 * counts[1]));
  if (counts[2] > 0) loss = loss + terms.lambda_neg * (cfg.coef / (2.0 * counts[2]));
  return loss;
}

at::Tensor critic_metric_sums(const at::Tensor& values, const at::Tensor& labels) {
  check_inputs(values, labels, nullptr);
  const at::Tensor v = values.detach().to(at::kDouble);
  const at::Tensor m = solution_mask(labels, at::kDouble).to(v.device());
  const int64_t N = v.size(0), B = N / 2, S = v.size(1);
  std::vector<at::Tensor> out(kCriticMetricSums);
  out[kPairs] = at::full({}, double(B), v.options());

  const at::Tensor n = m.sum(1);
  const at::Tensor vbar = (v * m).sum(1) / (n + kMeanEps);
  const at::Tensor vpos = vbar.narrow(0, 0, B), vneg = vbar.narrow(0, B, B);
  out[kCorrectPairs] = vpos.gt(vneg).sum().to(at::kDouble);
  out[kMeanPosSum] = vpos.sum();
  out[kMeanNegSum] = vneg.sum();

  // Token variance per sequence.
  const at::Tensor var = ((v - vbar.unsqueeze(1)).pow(2) * m).sum(1) / (n + kMeanEps);

  // Consecutive-token differences between solution tokens.
  at::Tensor spike = at::zeros({N}, v.options()), abs_td = at::zeros({N}, v.options());
  if (S > 1) {
    const at::Tensor tm = m.narrow(1, 1, S - 1) * m.narrow(1, 0, S - 1);
    const at::Tensor td = (v.narrow(1, 1, S - 1) - v.narrow(1, 0, S - 1)).abs() * tm;
    abs_td = td.sum(1) / tm.sum(1).clamp_min(1.0);
    const at::Tensor max_td = at::where(tm.gt(0), td, at::zeros_like(td)).amax(1);  // |ΔV| >= 0
    spike = max_td / (abs_td + kMeanEps);
  }

  // Pearson correlation of V with the position index, per sequence with >= 3 solution tokens.
  const at::Tensor pos = at::arange(S, v.options()).unsqueeze(0).expand({N, S});
  const at::Tensor vc = (v - vbar.unsqueeze(1)) * m;
  const at::Tensor pmean = (pos * m).sum(1) / (n + kMeanEps);
  const at::Tensor pc = (pos - pmean.unsqueeze(1)) * m;
  const at::Tensor corr = (vc * pc).sum(1) / (vc.pow(2).sum(1).sqrt() * pc.pow(2).sum(1).sqrt() + kMeanEps);
  const at::Tensor corr_ok = n.ge(3).to(at::kDouble);

  auto side = [&](const at::Tensor& t, int64_t half) { return t.narrow(0, half * B, B).sum(); };
  out[kPosVarSum] = side(var, 0), out[kNegVarSum] = side(var, 1);
  out[kPosSpikeSum] = side(spike, 0), out[kNegSpikeSum] = side(spike, 1);
  out[kPosAbsTdSum] = side(abs_td, 0), out[kNegAbsTdSum] = side(abs_td, 1);
  out[kPosCorrSum] = side(corr * corr_ok, 0), out[kNegCorrSum] = side(corr * corr_ok, 1);
  out[kPosCorrSeqs] = side(corr_ok, 0), out[kNegCorrSeqs] = side(corr_ok, 1);
  return at::stack(out);
}

CriticMetrics critic_metrics(const double* s) {
  CriticMetrics m;
  const double pairs = s[kPairs];
  auto per_pair = [&](int i) { return pairs > 0 ? s[i] / pairs : 0.0; };
  m.pairwise_accuracy = per_pair(kCorrectPairs);
  m.mean_pos = per_pair(kMeanPosSum);
  m.mean_neg = per_pair(kMeanNegSum);
  m.margin = m.mean_pos - m.mean_neg;
  m.pos_token_variance = per_pair(kPosVarSum);
  m.neg_token_variance = per_pair(kNegVarSum);
  m.pos_spikiness = per_pair(kPosSpikeSum);
  m.neg_spikiness = per_pair(kNegSpikeSum);
  m.pos_mean_abs_td = per_pair(kPosAbsTdSum);
  m.neg_mean_abs_td = per_pair(kNegAbsTdSum);
  m.pos_position_corr = s[kPosCorrSeqs] > 0 ? s[kPosCorrSum] / s[kPosCorrSeqs] : 0.0;
  m.neg_position_corr = s[kNegCorrSeqs] > 0 ? s[kNegCorrSum] / s[kNegCorrSeqs] : 0.0;
  return m;
}

}  // namespace wmtp
