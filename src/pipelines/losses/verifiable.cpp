// Verifiable WMTP token weights: GAE scan, whitening, exponential weights, EMA (see verifiable.h).
#include "pipelines/losses/verifiable.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "ckpt/train_state.h"
#include "core/error.h"
#include "core/labels.h"

namespace wmtp {

namespace {
constexpr double kWhitenEps = 1e-8;    // z = (A - mu) / (sigma + 1e-8), as the original
constexpr double kEntropyEps = 1e-10;  // -w log(w + 1e-10)
constexpr double kMinVariance = 1e-8;  // EMA batch variance clamp

at::Tensor values_2d(const at::Tensor& values) {
  if (values.dim() == 3 && values.size(2) == 1) return values.squeeze(2);
  if (values.dim() != 2) throw_usage("verifiable: critic values must be [B, S] or [B, S, 1], got ", values.sizes());
  return values;
}

at::Tensor host_double(const at::Tensor& t) { return t.detach().to(at::kCPU).to(at::kDouble).contiguous(); }
at::Tensor host_bool(const at::Tensor& t) { return t.detach().to(at::kCPU).ne(0).contiguous(); }
}  // namespace

void TdWeightConfig::validate() const {
  if (!(td_lambda >= 0.0 && td_lambda <= 1.0))
    throw_usage("[verifiable] td_lambda = ", td_lambda, ": expected a value in [0, 1]");
  if (!std::isfinite(initial_value)) throw_usage("[verifiable] initial_value must be finite");
  if (!(beta > 0.0) || !std::isfinite(beta)) throw_usage("[verifiable] beta = ", beta, ": expected > 0");
  if (!(weight_clip_min > 0.0)) throw_usage("[verifiable] weight_clip_min = ", weight_clip_min, ": expected > 0");
  if (!(weight_clip_max >= weight_clip_min) || !std::isfinite(weight_clip_max))
    throw_usage("[verifiable] weight_clip_max = ", weight_clip_max, ": expected a finite value >= weight_clip_min (",
                weight_clip_min, ")");
  if (!(td_ema_momentum > 0.0 && td_ema_momentum <= 1.0))
    throw_usage("[verifiable] td_ema_momentum = ", td_ema_momentum, ": expected a value in (0, 1]");
  if (td_ema_warmup_steps < 0)
    throw_usage("[verifiable] td_ema_warmup_steps = ", td_ema_warmup_steps, ": expected >= 0");
}

at::Tensor solution_mask(const at::Tensor& labels) { return labels.ne(kIgnoreIndex); }

at::Tensor gae_advantage(const at::Tensor& values, const at::Tensor& mask, double td_lambda, double initial_value,
                         double reward) {
  const at::Tensor v = host_double(values_2d(values));
  const at::Tensor m = host_bool(mask);
  if (m.sizes() != v.sizes())
    throw_usage("verifiable: values ", v.sizes(), " and labels ", m.sizes(), " differ in shape");
  const int64_t B = v.size(0), S = v.size(1);
  at::Tensor adv = at::zeros({B, S}, at::kDouble);
  auto V = v.accessor<double, 2>();
  auto M = m.accessor<bool, 2>();
  auto A = adv.accessor<double, 2>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t T = -1;
    for (int64_t t = S - 1; t >= 0 && T < 0; --t)
      if (M[b][t]) T = t;
    if (T < 0) continue;  // no solution token: nothing to weigh
    if (td_lambda == 1.0) {
      for (int64_t t = 0; t <= T; ++t)
        if (M[b][t]) A[b][t] = reward - V[b][t];
      continue;
    }
    // Reverse scan over every position up to T (prompt included: the first solution token's
    // delta needs the prompt's last value), kept only on the mask.
    double next = 0.0;
    for (int64_t t = T; t >= 0; --t) {
      const double prev = t > 0 ? V[b][t - 1] : initial_value;
      const double a = (V[b][t] - prev) + td_lambda * next;
      next = a;
      if (M[b][t]) A[b][t] = a;
    }
  }
  return adv;
}

std::optional<WhiteningStats> batch_statistics(const at::Tensor& adv, const at::Tensor& mask) {
  const at::Tensor valid = host_double(adv).masked_select(host_bool(mask));
  const int64_t n = valid.numel();
  if (n <= 1) return std::nullopt;
  const double mean = valid.sum().item<double>() / static_cast<double>(n);
  const double ss = (valid - mean).pow(2).sum().item<double>();
  return WhiteningStats{mean, std::sqrt(ss / static_cast<double>(n - 1))};
}

void TdSums::append_to(std::vector<double>& sum, std::vector<double>& max) const {
  sum.insert(sum.end(), {count, adv_sum, adv_sumsq, w_sum, w_sumsq, w_entropy, clipped, value_se});
  max.insert(max.end(), {w_max, neg_w_min});
}

TdSums TdSums::read(const std::vector<double>& sum, size_t so, const std::vector<double>& max, size_t mo) {
  if (sum.size() < so + kSums || max.size() < mo + kMaxes)
    throw_runtime("verifiable: step statistics too short (", sum.size(), " sums, ", max.size(), " maxima)");
  TdSums s;
  s.count = sum[so];
  s.adv_sum = sum[so + 1];
  s.adv_sumsq = sum[so + 2];
  s.w_sum = sum[so + 3];
  s.w_sumsq = sum[so + 4];
  s.w_entropy = sum[so + 5];
  s.clipped = sum[so + 6];
  s.value_se = sum[so + 7];
  s.w_max = max[mo];
  s.neg_w_min = max[mo + 1];
  return s;
}

void TdSums::accumulate(const TdSums& o) {
  count += o.count;
  adv_sum += o.adv_sum;
  adv_sumsq += o.adv_sumsq;
  w_sum += o.w_sum;
  w_sumsq += o.w_sumsq;
  w_entropy += o.w_entropy;
  clipped += o.clipped;
  value_se += o.value_se;
  w_max = std::max(w_max, o.w_max);
  neg_w_min = std::max(neg_w_min, o.neg_w_min);
}

namespace {
// Unbiased std from sums (0 for fewer than 2 values; variance clamped at 0 against rounding).
double unbiased_std(double sum, double sumsq, double n) {
  if (n < 2) return 0.0;
  const double var = (sumsq - sum * sum / n) / (n - 1);
  return std::sqrt(std::max(var, 0.0));
}
}  // namespace

TdMetrics td_metrics(const TdSums& s) {
  TdMetrics m;
  if (s.count <= 0) return m;
  m.td_mean = s.adv_sum / s.count;
  m.td_std = unbiased_std(s.adv_sum, s.adv_sumsq, s.count);
  m.weight_mean = s.w_sum / s.count;
  m.weight_std = unbiased_std(s.w_sum, s.w_sumsq, s.count);
  m.weight_min = -s.neg_w_min;
  m.weight_max = s.w_max;
  m.weight_entropy = s.w_entropy / s.count;
  m.clipping_ratio = s.clipped / s.count;
  m.value_mse = s.value_se / s.count;
  return m;
}

TokenWeights verifiable_weights(const at::Tensor& values, const at::Tensor& labels, const TdWeightConfig& cfg,
                                const std::optional<WhiteningStats>& stats) {
  const at::Tensor v2 = values_2d(values);
  const at::Tensor mask = host_bool(solution_mask(labels));
  TokenWeights out;
  out.advantage = gae_advantage(v2, mask, cfg.td_lambda, cfg.initial_value);
  const std::optional<WhiteningStats> ws = stats ? stats : batch_statistics(out.advantage, mask);

  const at::Tensor v = host_double(v2);
  at::Tensor w = at::zeros_like(out.advantage);
  auto A = out.advantage.accessor<double, 2>();
  auto M = mask.accessor<bool, 2>();
  auto Vv = v.accessor<double, 2>();
  auto W = w.accessor<double, 2>();
  TdSums& s = out.sums;
  for (int64_t b = 0; b < w.size(0); ++b)
    for (int64_t t = 0; t < w.size(1); ++t) {
      if (!M[b][t]) continue;
      double wt = 1.0;  // batch statistics undefined (<= 1 valid token): w = m
      if (ws) {
        const double raw = std::exp(((A[b][t] - ws->mean) / (ws->std + kWhitenEps)) / cfg.beta);
        if (raw < cfg.weight_clip_min || raw > cfg.weight_clip_max) s.clipped += 1;
        wt = std::min(std::max(raw, cfg.weight_clip_min), cfg.weight_clip_max);
      }
      W[b][t] = wt;
      s.count += 1;
      s.adv_sum += A[b][t];
      s.adv_sumsq += A[b][t] * A[b][t];
      s.w_sum += wt;
      s.w_sumsq += wt * wt;
      s.w_entropy += -wt * std::log(wt + kEntropyEps);
      s.value_se += (Vv[b][t] - 1.0) * (Vv[b][t] - 1.0);
      s.w_max = std::max(s.w_max, wt);
      s.neg_w_min = std::max(s.neg_w_min, -wt);
    }
  out.weights = w.to(at::kFloat).to(values.device());
  return out;
}

TdStatsEma::TdStatsEma(double momentum, int64_t warmup_steps) : momentum_(momentum), warmup_(warmup_steps) {}

void TdStatsEma::update(double sum, double sumsq, double count) {
  if (count <= 0) return;
  const double batch_mean = sum / count;
  const double batch_std = std::sqrt(std::max(sumsq / count - batch_mean * batch_mean, kMinVariance));
  step_count_ += 1;
  double keep = 1.0 - momentum_;
  if (step_count_ <= warmup_) keep = static_cast<double>(step_count_ - 1) / static_cast<double>(warmup_);
  mean_ = keep * mean_ + (1.0 - keep) * batch_mean;
  std_ = keep * std_ + (1.0 - keep) * batch_std;
}

void TdStatsEma::save(TrainState& st, const std::string& prefix) const {
  st.set_double(prefix + ".mean", mean_);
  st.set_double(prefix + ".std", std_);
  st.set_int(prefix + ".step_count", step_count_);
}

void TdStatsEma::load(const TrainState& st, const std::string& prefix) {
  mean_ = st.get_double(prefix + ".mean");
  std_ = st.get_double(prefix + ".std");
  step_count_ = st.get_int(prefix + ".step_count");
}

}  // namespace wmtp
