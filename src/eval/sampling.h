// Next-token choice during generation (weighted_mtp's generate_with_mtp rules, docs/parity.md): greedy = argmax of the
// logits when temperature <= 0; otherwise logits / T, then the nucleus filter — tokens sorted by
// probability, those whose cumulative probability (inclusive) exceeds top_p removed, the most likely
// token always kept — renormalized, and one draw. Draws come from a counter-based stream per
// (seed, prompt, sample), so a completion never depends on which rank made it or on the rank count.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace wmtp {

struct SamplingConfig {
  double temperature = 0.0;  // <= 0: greedy
  double top_p = 1.0;        // nucleus mass in (0, 1]
  bool greedy() const { return temperature <= 0.0; }
};

// A SplitMix64 stream: uniform doubles in [0, 1) with 53 random bits.
class TokenRng {
 public:
  explicit TokenRng(uint64_t state) : state_(state) {}
  uint64_t next_u64();
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// The stream of sample `sample` of prompt number `prompt` (its 0-based position in the input).
TokenRng stream_rng(uint64_t seed, int64_t prompt, int64_t sample);

// argmax of a logits row [V] (the lowest index among equal maxima).
int64_t greedy_token(const at::Tensor& logits);
// The sampling distribution of a logits row [V] (any dtype/device) after temperature and nucleus,
// on the host in double; needs temperature > 0.
std::vector<double> next_token_probs(const at::Tensor& logits, const SamplingConfig& cfg);
// The same from V logits already on the host in double (a decoder copies a forward's logits once).
std::vector<double> next_token_probs(const double* logits, size_t V, const SamplingConfig& cfg);
// One draw from a distribution whose entries sum to ~1 (inverse CDF; the last positive entry absorbs rounding).
int64_t draw_token(const std::vector<double>& probs, TokenRng& rng);

}  // namespace wmtp
