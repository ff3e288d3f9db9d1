// Deterministic, counter-based parameter initialization: element i of the row-major flattened
// parameter `fqn` is a pure function of (seed, fqn, i). A rank generates exactly the elements it
// holds — the full model never exists anywhere — and the values do not depend on the rank, the world
// size, the device, the order of the spec list, or whether LoRA/value-head parameters exist beside it.
//
// Generator: SplitMix64 evaluated at a counter (output c of the stream seeded by
// splitmix64(seed ^ fnv1a64(fqn))), 53-bit uniforms in double; normals by Box-Muller over pairs of
// elements (2p, 2p+1) — cos for the even, sin for the odd element. Values are computed in double on
// the CPU and rounded once to the target dtype, so a given glibc gives the same bits on every rank.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wmtp {

// How a parameter starts.
struct InitRule {
  enum class Kind { Constant, Normal, Uniform };
  Kind kind = Kind::Constant;
  double value = 0.0;  // Constant: the value; Normal: the standard deviation (mean 0); Uniform: bound b of U(-b, b)

  static InitRule constant(double v) { return {Kind::Constant, v}; }
  static InitRule normal(double std) { return {Kind::Normal, std}; }
  static InitRule uniform(double bound) { return {Kind::Uniform, bound}; }
  // PyTorch's default nn.Linear weight init, Kaiming-uniform(a = sqrt 5) = U(+-1/sqrt(fan_in)).
  static InitRule kaiming_uniform_sqrt5(int64_t fan_in);
};

// Writes elements [offset, offset + out.numel()) of parameter `fqn` under `rule` into `out` (1-D,
// any floating dtype, any device; contiguous or not). Parallel over the CPU's intra-op threads;
// other dtypes/devices go through a bounded fp32 scratch (kInitScratchElements).
void fill_init_range(const at::Tensor& out, const InitRule& rule, uint64_t seed, const std::string& fqn,
                     int64_t offset);
constexpr int64_t kInitScratchElements = int64_t(1) << 22;  // 16 MiB of fp32

// The whole parameter as an fp32 CPU tensor of `shape` (the same values as any set of ranges).
at::Tensor init_tensor(const std::vector<int64_t>& shape, const InitRule& rule, uint64_t seed, const std::string& fqn);

}  // namespace wmtp
