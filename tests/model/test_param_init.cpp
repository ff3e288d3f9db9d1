// Counter-based initialization (param_init.h): element i of a parameter is a pure function of
// (seed, FQN, i) — checked against the generator's formula written out here in double precision —
// so any split into ranges (odd offsets cut Box-Muller pairs) reproduces the whole tensor bit for
// bit, in fp32 or bf16; the draws have the documented distributions; the model's rules per FQN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "model/mtp.h"
#include "model/param_init.h"
#include "model_test_util.h"

namespace wmtp {
namespace {

// The documented generator, independently: SplitMix64 output c of the stream keyed by
// mix(seed ^ fnv1a64(fqn)); normals by Box-Muller on counters (2p, 2p+1).
struct ReferenceGenerator {
  uint64_t key;
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  ReferenceGenerator(uint64_t seed, const std::string& fqn) {
    uint64_t h = 14695981039346656037ull;
    for (unsigned char c : fqn) h = (h ^ c) * 1099511628211ull;
    key = mix(seed ^ h);
  }
  uint64_t bits(uint64_t c) const { return mix(key + (c + 1) * 0x9e3779b97f4a7c15ull); }
  double normal(int64_t i) const {
    const uint64_t p = static_cast<uint64_t>(i / 2);
    const double u1 = (double((bits(2 * p) >> 11)) + 1.0) / 9007199254740992.0;
    const double u2 = double(bits(2 * p + 1) >> 11) / 9007199254740992.0;
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * M_PI * u2;
    return i % 2 == 0 ? r * std::cos(t) : r * std::sin(t);
  }
  double uniform(int64_t i) const { return 2.0 * (double(bits(uint64_t(i)) >> 11) / 9007199254740992.0) - 1.0; }
};

TEST(ParamInit, ElementsFollowTheDocumentedFormula) {
  const std::string fqn = "layers.3.attention.wq.weight";
  ReferenceGenerator ref(17, fqn);
  at::Tensor n = init_tensor({7, 9}, InitRule::normal(0.02), 17, fqn).view({-1});
  at::Tensor u = init_tensor({63}, InitRule::uniform(0.25), 17, fqn);
  for (int64_t i = 0; i < 63; ++i) {
    EXPECT_EQ(n[i].item<float>(), static_cast<float>(0.02 * ref.normal(i))) << i;
    EXPECT_EQ(u[i].item<float>(), static_cast<float>(0.25 * ref.uniform(i))) << i;
  }
}

TEST(ParamInit, AnySplitIntoRangesReproducesTheWholeTensorBitwise) {
  const std::string fqn = "output.weight";
  for (InitRule rule : {InitRule::normal(0.02), InitRule::uniform(0.1), InitRule::constant(0.7)}) {
    at::Tensor whole = init_tensor({1001}, rule, 3, fqn);
    // ranges with odd and even starts and lengths, split over "ranks"
    at::Tensor pieces = at::empty({1001});
    const std::vector<int64_t> cuts = {0, 1, 250, 251, 502, 777, 1000, 1001};
    for (size_t i = 0; i + 1 < cuts.size(); ++i)
      fill_init_range(pieces.narrow(0, cuts[i], cuts[i + 1] - cuts[i]), rule, 3, fqn, cuts[i]);
    EXPECT_TRUE(at::equal(pieces, whole)) << int(rule.kind);
    // a bf16 destination holds what casting the fp32 values gives; non-contiguous output too
    at::Tensor bf = at::empty({1001}, at::kBFloat16);
    fill_init_range(bf.narrow(0, 5, 996), rule, 3, fqn, 5);
    EXPECT_TRUE(at::equal(bf.narrow(0, 5, 996), whole.narrow(0, 5, 996).to(at::kBFloat16)));
    at::Tensor strided = at::zeros({2002}).slice(0, 0, 2002, 2);
    fill_init_range(strided, rule, 3, fqn, 0);
    EXPECT_TRUE(at::equal(strided, whole));
  }
  // larger than the scratch buffer, bf16 (goes through scratch in several chunks)
  const int64_t big = kInitScratchElements + 12345;
  at::Tensor whole = init_tensor({big}, InitRule::normal(1.0), 4, fqn);
  at::Tensor bf = at::empty({big - 3}, at::kBFloat16);
  fill_init_range(bf, InitRule::normal(1.0), 4, fqn, 3);
  EXPECT_TRUE(at::equal(bf, whole.narrow(0, 3, big - 3).to(at::kBFloat16)));
}

TEST(ParamInit, DrawsHaveTheDocumentedDistributions) {
  const int64_t n = 1 << 21;
  at::Tensor x = init_tensor({n}, InitRule::normal(0.02), 1, "tok_embeddings.weight").to(at::kDouble) / 0.02;
  const double se = 1.0 / std::sqrt(double(n));
  EXPECT_NEAR(x.mean().item<double>(), 0.0, 5 * se);
  EXPECT_NEAR(x.std().item<double>(), 1.0, 5 * se);
  EXPECT_NEAR(x.abs().gt(2.0).to(at::kDouble).mean().item<double>(), 0.0455, 0.001);  // P(|z| > 2)
  EXPECT_NEAR(x.pow(4).mean().item<double>(), 3.0, 0.02);                             // kurtosis
  // neighbours (the cos/sin pair) are uncorrelated
  at::Tensor even = x.slice(0, 0, n, 2), odd = x.slice(0, 1, n, 2);
  EXPECT_NEAR((even * odd).mean().item<double>(), 0.0, 5 * std::sqrt(2.0) * se);

  at::Tensor u = init_tensor({n}, InitRule::uniform(0.5), 1, "layers.0.attention.wq.lora_A").to(at::kDouble);
  EXPECT_LE(u.abs().max().item<double>(), 0.5);
  EXPECT_NEAR(u.mean().item<double>(), 0.0, 5 * 0.5 * se);
  EXPECT_NEAR(u.pow(2).mean().item<double>(), 0.25 / 3.0, 0.002);
  EXPECT_NEAR(u.lt(-0.25).to(at::kDouble).mean().item<double>(), 0.25, 0.002);

  // different seeds and different names give unrelated streams
  at::Tensor y = init_tensor({n}, InitRule::normal(1.0), 2, "tok_embeddings.weight").to(at::kDouble);
  at::Tensor z = init_tensor({n}, InitRule::normal(1.0), 1, "tok_embeddings.weightx").to(at::kDouble);
  EXPECT_NEAR((x * y).mean().item<double>(), 0.0, 5 * se);
  EXPECT_NEAR((x * z).mean().item<double>(), 0.0, 5 * se);
}

TEST(ParamInit, ModelRulesAndRangesMatchInitParams) {
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = 3;
  lora.targets = {"wq", "w2"};
  MtpModel m(test::tiny_args(), lora);
  auto full = m.init_params(8);
  EXPECT_EQ(full.size(), m.param_specs().size());
  for (const ParamSpec& s : m.param_specs()) {
    const at::Tensor& t = full.at(s.fqn);
    at::Tensor part = at::empty({s.numel() - 1});
    m.init_range(s.fqn, 1, part, 8);
    EXPECT_TRUE(at::equal(part, t.view({-1}).narrow(0, 1, s.numel() - 1))) << s.fqn;
  }
  EXPECT_TRUE(at::equal(full.at("norm.weight"), at::ones({32})));
  EXPECT_TRUE(at::equal(full.at("layers.0.attention.wq.lora_B"), at::zeros({32, 3})));
  EXPECT_LE(full.at("layers.0.feed_forward.w2.lora_A").abs().max().item<double>(), 1.0 / std::sqrt(96.0));
  EXPECT_GT(full.at("layers.0.feed_forward.w2.lora_A").abs().max().item<double>(), 0.9 / std::sqrt(96.0));
  EXPECT_NEAR(full.at("tok_embeddings.weight").std().item<double>(), 0.02, 0.002);
  // a value model (n_future 1, no output projection): the value head's rules
  ValueHeadConfig vh;
  vh.enabled = true;
  vh.bias_init = 0.5;
  MtpModel critic(test::tiny_args(2, 1), LoraConfig{}, vh);
  auto values = critic.init_params(8);
  for (const ParamSpec& s : critic.param_specs()) {
    at::Tensor part = at::empty({s.numel() - 1});
    critic.init_range(s.fqn, 1, part, 8);
    EXPECT_TRUE(at::equal(part, values.at(s.fqn).view({-1}).narrow(0, 1, s.numel() - 1))) << s.fqn;
  }
  EXPECT_TRUE(at::equal(values.at("value_head.mlp.6.bias"), at::full({1}, 0.5)));
  EXPECT_TRUE(at::equal(values.at("value_head.mlp.6.weight"), at::zeros({1, 4})));
  EXPECT_LE(values.at("value_head.mlp.0.weight").abs().max().item<double>(), 1.0 / std::sqrt(32.0));
  EXPECT_TRUE(at::equal(values.at("layers.0.attention.wq.weight"), full.at("layers.0.attention.wq.weight")));
  // the same FQN draws the same values whatever else the model has
  auto plain = MtpModel(test::tiny_args()).init_params(8);
  EXPECT_TRUE(at::equal(plain.at("layers.1.attention.wq.weight"), full.at("layers.1.attention.wq.weight")));
  EXPECT_THROW(m.init_rule("layers.9.attention.wq.weight"), Error);
}

}  // namespace
}  // namespace wmtp
