// The verifiable tests' independent double-precision computation (verifiable_reference.h).
#include "verifiable_reference.h"

#include <algorithm>
#include <cmath>

namespace wmtp::test {

std::vector<double> reference_gae(const std::vector<double>& values, const std::vector<int64_t>& labels, double lambda,
                                  double v_init) {
  const int64_t S = static_cast<int64_t>(labels.size());
  std::vector<double> adv(S, 0.0);
  int64_t last = -1;
  for (int64_t t = 0; t < S; ++t)
    if (labels[t] != -100) last = t;
  if (last < 0) return adv;
  if (lambda == 1.0) {
    for (int64_t t = 0; t < S; ++t)
      if (labels[t] != -100) adv[t] = 1.0 - values[t];
    return adv;
  }
  std::vector<double> delta(last + 1), gae(last + 2, 0.0);
  for (int64_t t = 0; t <= last; ++t) delta[t] = values[t] - (t == 0 ? v_init : values[t - 1]);
  for (int64_t t = last; t >= 0; --t) gae[t] = delta[t] + lambda * gae[t + 1];
  for (int64_t t = 0; t <= last; ++t)
    if (labels[t] != -100) adv[t] = gae[t];
  return adv;
}

double reference_weight(double adv, double mean, double sd, const TdWeightConfig& c) {
  const double raw = std::exp(((adv - mean) / (sd + 1e-8)) / c.beta);
  return std::min(std::max(raw, c.weight_clip_min), c.weight_clip_max);
}

bool reference_clipped(double adv, double mean, double sd, const TdWeightConfig& c) {
  const double raw = std::exp(((adv - mean) / (sd + 1e-8)) / c.beta);
  return raw < c.weight_clip_min || raw > c.weight_clip_max;
}

void ReferenceEma::update(const std::vector<double>& valid, double momentum, int64_t warmup) {
  if (valid.empty()) return;
  double m = 0, sq = 0;
  for (double a : valid) m += a;
  m /= valid.size();
  for (double a : valid) sq += a * a;
  const double var = std::max(sq / valid.size() - m * m, 1e-8);
  steps += 1;
  const double keep = steps <= warmup ? double(steps - 1) / warmup : 1.0 - momentum;
  mean = keep * mean + (1 - keep) * m;
  sd = keep * sd + (1 - keep) * std::sqrt(var);
}

void mean_and_std(const std::vector<double>& x, double* mean, double* sd) {
  double m = 0, ss = 0;
  for (double a : x) m += a;
  m /= x.size();
  for (double a : x) ss += (a - m) * (a - m);
  *mean = m;
  *sd = x.size() > 1 ? std::sqrt(ss / (x.size() - 1)) : 0.0;
}

}  // namespace wmtp::test
