// Verifiable WMTP token weights: GAE scan, whitening, exponential weights, EMA (see verifiable.h).
#include "pipelines/losses/verifiable.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "ckpt/train_keys.h"
#include "ckpt/train_state.h"
#include "core/error.h"
#include "core/labels.h"
#include "pipelines/losses/discounted_sum.h"

namespace wmtp {

namespace {
constexpr double kWhitenEps = 1e-8;    // z = (A - mu) / (sigma + 1e-8), as weighted_mtp
constexpr double kEntropyEps = 1e-10;  // -w log(w + 1e-10)
constexpr double kMinVariance = 1e-8;  // EMA batch variance clamp

at::Tensor values_2d(const at::Tensor& values) {
  if (values.dim() == 3 && values.size(2) == 1) return values.squeeze(2);
  if (values.dim() != 2) throw_usage("verifiable: critic values must be [B, S] or [B, S, 1], got ", values.sizes());
  return values;
}

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
  const at::Tensor v = values_2d(values).detach().to(at::kDouble);
  const at::Tensor m = mask.to(v.device()).ne(0);
  if (m.sizes() != v.sizes())
    throw_usage("verifiable: values ", v.sizes(), " and labels ", m.sizes(), " differ in shape");
  const at::Tensor zero = at::zeros({}, v.options());
  if (td_lambda == 1.0) return at::where(m, reward - v, zero);
  // The scan runs over every position up to the row's last solution token T (prompt included: the
  // first solution token's delta needs the prompt's last value); a row without one gets zeros.
  const int64_t S = v.size(1);
  const at::Tensor pos = at::arange(S, v.options().dtype(at::kLong));
  const at::Tensor last = at::where(m, pos, at::full({}, int64_t(-1), pos.options())).amax(1, /*keepdim=*/true);
  const at::Tensor prev = at::cat({at::full({v.size(0), 1}, initial_value, v.options()), v.narrow(1, 0, S - 1)}, 1);
  const at::Tensor delta = at::where(pos.unsqueeze(0).le(last), v - prev, zero);
  return at::where(m, reverse_discounted_sum(delta, td_lambda), zero);
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
  const at::Tensor v = values_2d(values).detach().to(at::kDouble);
  const at::Tensor m = solution_mask(labels).to(v.device());
  const at::Tensor md = m.to(at::kDouble), zero = at::zeros({}, v.options());
  TokenWeights out;
  out.advantage = gae_advantage(v, m, cfg.td_lambda, cfg.initial_value);
  const at::Tensor& A = out.advantage;
  // Whitening statistics: the EMA's, or the micro-batch's own over its valid tokens (undefined
  // with fewer than 2: then w = m). Tensors on the device either way: nothing is read back.
  at::Tensor mean, sd, whiten;
  if (stats) {
    mean = at::full({}, stats->mean, v.options()), sd = at::full({}, stats->std, v.options());
    whiten = at::ones({}, m.options());
  } else {
    const at::Tensor n = md.sum();
    mean = A.sum() / n;  // A is 0 off the mask
    sd = ((A - mean).pow(2) * md).sum().div(n - 1).sqrt();
    whiten = n.gt(1);
  }
  const at::Tensor raw = at::exp(((A - mean) / (sd + kWhitenEps)) / cfg.beta);
  const at::Tensor clipped = raw.lt(cfg.weight_clip_min).logical_or(raw.gt(cfg.weight_clip_max)).logical_and(whiten);
  const at::Tensor w = at::where(
      m, at::where(whiten, raw.clamp(cfg.weight_clip_min, cfg.weight_clip_max), at::ones({}, v.options())), zero);
  // TdSums' figures in its order (append_to), maxima -1e300 where no token.
  const at::Tensor none = at::full({}, -1e300, v.options());
  out.sums = at::stack({md.sum(), A.sum(), (A * A).sum(), w.sum(), (w * w).sum(),
                        at::where(m, -w * at::log(w + kEntropyEps), zero).sum(),
                        clipped.logical_and(m).sum().to(at::kDouble), ((v - 1.0).pow(2) * md).sum()});
  out.maxes = at::stack({at::where(m, w, none).amax(), at::where(m, -w, none).amax()});
  out.weights = w.to(at::kFloat);
  return out;
}

TdSums TokenWeights::read_sums() const {
  const at::Tensor s = sums.to(at::kCPU).contiguous(), x = maxes.to(at::kCPU).contiguous();
  return TdSums::read(std::vector<double>(s.data_ptr<double>(), s.data_ptr<double>() + s.numel()), 0,
                      std::vector<double>(x.data_ptr<double>(), x.data_ptr<double>() + x.numel()), 0);
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
  st.set_double(prefix + train_keys::kTdEmaMean, mean_);
  st.set_double(prefix + train_keys::kTdEmaStd, std_);
  st.set_int(prefix + train_keys::kTdEmaStepCount, step_count_);
}

void TdStatsEma::load(const TrainState& st, const std::string& prefix) {
  mean_ = st.get_double(prefix + train_keys::kTdEmaMean);
  std_ = st.get_double(prefix + train_keys::kTdEmaStd);
  step_count_ = st.get_int(prefix + train_keys::kTdEmaStepCount);
}

}  // namespace wmtp
