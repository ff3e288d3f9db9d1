// Deterministic parameter initialisation: each tensor draws from its own CPU generator seeded by
// (seed, FQN), so a parameter's initial value depends on nothing else — not on the rank, the world
// size, the order of the spec list, or whether LoRA/value-head parameters exist beside it.
#pragma once
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wmtp {

// A CPU generator seeded from splitmix64(seed ^ fnv1a64(fqn)).
at::Generator make_param_generator(uint64_t seed, const std::string& fqn);

// fp32 CPU tensors.
at::Tensor init_normal(const std::vector<int64_t>& shape, double std, uint64_t seed, const std::string& fqn);
at::Tensor init_uniform(const std::vector<int64_t>& shape, double bound, uint64_t seed, const std::string& fqn);
// PyTorch's default nn.Linear weight init, Kaiming-uniform(a = sqrt 5) = U(+-1/sqrt(fan_in)), with
// fan_in = shape.back(). (The default bias init is init_uniform with the same bound.)
at::Tensor init_kaiming_uniform_sqrt5(const std::vector<int64_t>& shape, uint64_t seed, const std::string& fqn);
at::Tensor init_constant(const std::vector<int64_t>& shape, double value);

}  // namespace wmtp
