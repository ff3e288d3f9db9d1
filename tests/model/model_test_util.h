// Helpers for the model tests: tiny ModelArgs (tests/support/tiny_model.h), a model + LocalParams from a seed, random batches,
// gradient snapshots and a relative-difference measure.
#pragma once
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <string>

#include "model/local_params.h"
#include "model/mtp.h"
#include "tiny_model.h"

namespace wmtp::test {

inline LocalParams make_local(const MtpModel& m, uint64_t seed, std::optional<at::ScalarType> compute = std::nullopt) {
  return LocalParams(m.param_specs(), m.init_params(seed), compute);
}

// Deep copy, so several LocalParams built from one init do not share leaves (and gradients).
inline std::unordered_map<std::string, at::Tensor> clone_params(const std::unordered_map<std::string, at::Tensor>& p) {
  std::unordered_map<std::string, at::Tensor> out;
  for (const auto& kv : p) out[kv.first] = kv.second.clone();
  return out;
}

inline at::Tensor random_tokens(int64_t B, int64_t S, int64_t V, uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(V, {B, S}, g, at::TensorOptions().dtype(at::kLong));
}

// Right-padded labels: -100 on a prompt prefix and a padded suffix of each row (lengths vary).
inline at::Tensor prompt_masked_labels(const at::Tensor& tokens, uint64_t seed) {
  at::Tensor labels = tokens.clone();
  const int64_t B = tokens.size(0), S = tokens.size(1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t prompt = 1 + static_cast<int64_t>((seed + 3 * b) % (S / 3));
    const int64_t pad = static_cast<int64_t>((seed + 5 * b) % (S / 4));
    labels[b].narrow(0, 0, prompt).fill_(-100);
    if (pad > 0) labels[b].narrow(0, S - pad, pad).fill_(-100);
  }
  return labels;
}

inline std::map<std::string, at::Tensor> grads_of(const LocalParams& p) {
  std::map<std::string, at::Tensor> g;
  for (const auto& s : p.specs()) {
    const at::Tensor& t = p.param(s.fqn);
    if (t.grad().defined()) g[s.fqn] = t.grad().clone();
  }
  return g;
}

}  // namespace wmtp::test
