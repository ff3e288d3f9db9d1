// Greedy choice, temperature + nucleus distributions and draws from per-(prompt, sample) streams.
#include "eval/sampling.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/hash.h"

namespace wmtp {

uint64_t TokenRng::next_u64() { return splitmix64_mix(state_ += kSplitMix64Gamma); }

TokenRng stream_rng(uint64_t seed, int64_t prompt, int64_t sample) {
  return TokenRng(
      splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(prompt)) ^ static_cast<uint64_t>(sample)));
}

int64_t greedy_token(const at::Tensor& logits) {
  at::Tensor row = logits.reshape({-1}).to(at::kCPU, at::kFloat).contiguous();
  const float* v = row.data_ptr<float>();
  int64_t best = 0;
  for (int64_t i = 1; i < row.numel(); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

std::vector<double> next_token_probs(const at::Tensor& logits, const SamplingConfig& cfg) {
  at::Tensor row = logits.reshape({-1}).to(at::kCPU, at::kDouble).contiguous();
  return next_token_probs(row.data_ptr<double>(), static_cast<size_t>(row.numel()), cfg);
}

std::vector<double> next_token_probs(const double* l, size_t V, const SamplingConfig& cfg) {
  WMTP_CHECK(cfg.temperature > 0.0, "next_token_probs needs a positive temperature");
  std::vector<double> p(V);
  const double mx = *std::max_element(l, l + V);
  double sum = 0.0;
  for (size_t i = 0; i < V; ++i) sum += (p[i] = std::exp((l[i] - mx) / cfg.temperature));
  for (double& x : p) x /= sum;
  if (cfg.top_p >= 1.0) return p;
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  double cum = 0.0, kept = 0.0;
  std::vector<double> out(V, 0.0);
  for (size_t r = 0; r < V; ++r) {
    cum += p[order[r]];
    if (r > 0 && cum > cfg.top_p) break;  // sorted cumsum > top_p removed, the first token kept
    kept += (out[order[r]] = p[order[r]]);
  }
  for (double& x : out) x /= kept;
  return out;
}

int64_t draw_token(const std::vector<double>& probs, TokenRng& rng) {
  const double u = rng.uniform();
  double cum = 0.0;
  int64_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0) continue;
    last = static_cast<int64_t>(i);
    cum += probs[i];
    if (u < cum) return last;
  }
  WMTP_CHECK(last >= 0, "draw from an empty distribution");
  return last;
}

}  // namespace wmtp
