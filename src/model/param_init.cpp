// Per-(seed, FQN) generators and the few init rules the model uses.
#include "model/param_init.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace wmtp {

namespace {
uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

at::Generator make_param_generator(uint64_t seed, const std::string& fqn) {
  return at::make_generator<at::CPUGeneratorImpl>(splitmix64(seed ^ fnv1a64(fqn)));
}

at::Tensor init_normal(const std::vector<int64_t>& shape, double std, uint64_t seed, const std::string& fqn) {
  at::Generator gen = make_param_generator(seed, fqn);
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  t.normal_(0.0, std, gen);
  return t;
}

at::Tensor init_uniform(const std::vector<int64_t>& shape, double bound, uint64_t seed, const std::string& fqn) {
  at::Generator gen = make_param_generator(seed, fqn);
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  t.uniform_(-bound, bound, gen);
  return t;
}

at::Tensor init_kaiming_uniform_sqrt5(const std::vector<int64_t>& shape, uint64_t seed, const std::string& fqn) {
  // gain = sqrt(2 / (1 + a^2)) with a = sqrt 5; bound = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
  return init_uniform(shape, 1.0 / std::sqrt(static_cast<double>(shape.back())), seed, fqn);
}

at::Tensor init_constant(const std::vector<int64_t>& shape, double value) {
  return at::full(shape, value, at::TensorOptions().dtype(at::kFloat));
}

}  // namespace wmtp
