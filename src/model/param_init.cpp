// Counter-based initialization: SplitMix64 at a counter, Box-Muller for normals.
#include "model/param_init.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/hash.h"

namespace wmtp {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr double kTwoPow53 = 9007199254740992.0;

// Output number `counter` of the SplitMix64 stream whose state starts at `key`.
uint64_t at_counter(uint64_t key, uint64_t counter) { return splitmix64_mix(key + (counter + 1) * kSplitMix64Gamma); }

// [0, 1) with 53 random bits.
double unit_open1(uint64_t bits) { return static_cast<double>(bits >> 11) / kTwoPow53; }
// (0, 1]: safe for log.
double unit_open0(uint64_t bits) { return static_cast<double>((bits >> 11) + 1) / kTwoPow53; }

uint64_t stream_key(uint64_t seed, const std::string& fqn) { return splitmix64_mix(seed ^ fnv1a64(fqn)); }

// Elements [begin, begin + n) into dst[0 .. n).
void generate(float* dst, int64_t begin, int64_t n, const InitRule& rule, uint64_t key) {
  switch (rule.kind) {
    case InitRule::Kind::Constant: std::fill(dst, dst + n, static_cast<float>(rule.value)); return;
    case InitRule::Kind::Uniform:
      for (int64_t j = 0; j < n; ++j) {
        const double u = unit_open1(at_counter(key, static_cast<uint64_t>(begin + j)));
        dst[j] = static_cast<float>((2.0 * u - 1.0) * rule.value);
      }
      return;
    case InitRule::Kind::Normal: {
      // Pair p covers elements 2p (cos) and 2p+1 (sin) and draws counters 2p and 2p+1.
      const int64_t end = begin + n;
      for (int64_t p = begin / 2; 2 * p < end; ++p) {
        const double r = std::sqrt(-2.0 * std::log(unit_open0(at_counter(key, static_cast<uint64_t>(2 * p)))));
        const double theta = kTwoPi * unit_open1(at_counter(key, static_cast<uint64_t>(2 * p + 1)));
        if (2 * p >= begin) dst[2 * p - begin] = static_cast<float>(rule.value * r * std::cos(theta));
        if (2 * p + 1 < end && 2 * p + 1 >= begin)
          dst[2 * p + 1 - begin] = static_cast<float>(rule.value * r * std::sin(theta));
      }
      return;
    }
  }
}

// Parallel over intra-op threads; the values do not depend on how the range is split.
void generate_parallel(float* dst, int64_t begin, int64_t n, const InitRule& rule, uint64_t key) {
  at::parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) { generate(dst + lo, begin + lo, hi - lo, rule, key); });
}

}  // namespace

InitRule InitRule::kaiming_uniform_sqrt5(int64_t fan_in) {
  // gain = sqrt(2 / (1 + a^2)) with a = sqrt 5; bound = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
  return uniform(1.0 / std::sqrt(static_cast<double>(fan_in)));
}

void fill_init_range(const at::Tensor& out, const InitRule& rule, uint64_t seed, const std::string& fqn,
                     int64_t offset) {
  WMTP_CHECK(out.dim() == 1, "fill_init_range: expected a 1-D tensor, got ", out.sizes());
  WMTP_CHECK(offset >= 0, "fill_init_range: negative offset ", offset);
  c10::NoGradGuard no_grad;
  const int64_t n = out.numel();
  if (n == 0) return;
  if (rule.kind == InitRule::Kind::Constant) {
    // Rounded to fp32 first, so a bf16 shard holds what casting the fp32 tensor would give.
    out.fill_(static_cast<double>(static_cast<float>(rule.value)));
    return;
  }
  const uint64_t key = stream_key(seed, fqn);
  if (out.device().is_cpu() && out.scalar_type() == at::kFloat && out.is_contiguous()) {
    generate_parallel(out.data_ptr<float>(), offset, n, rule, key);
    return;
  }
  at::Tensor scratch = at::empty({std::min(n, kInitScratchElements)}, at::TensorOptions().dtype(at::kFloat));
  for (int64_t done = 0; done < n; done += scratch.numel()) {
    const int64_t len = std::min(scratch.numel(), n - done);
    generate_parallel(scratch.data_ptr<float>(), offset + done, len, rule, key);
    out.narrow(0, done, len).copy_(scratch.narrow(0, 0, len));
  }
}

at::Tensor init_tensor(const std::vector<int64_t>& shape, const InitRule& rule, uint64_t seed, const std::string& fqn) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  fill_init_range(t.view({-1}), rule, seed, fqn, 0);
  return t;
}

}  // namespace wmtp
