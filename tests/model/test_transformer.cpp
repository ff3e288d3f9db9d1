// The block maths and the MTP topology: an independent double-precision reference forward (complex
// RoPE as Meta writes it, per-head attention indexing the kv head directly), causality, GQA vs
// explicit head repetition, RoPE's relative-position property, head-0-only and hidden-state modes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "model/transformer.h"
#include "model_test_util.h"
#include "rel_diff.h"

namespace wmtp {
namespace {

using test::tiny_args;

// ---- independent reference (double precision) ----
struct Reference {
  const ModelArgs& a;
  const std::unordered_map<std::string, at::Tensor>& p;

  at::Tensor P(const std::string& n) const { return p.at(n).to(at::kDouble); }

  at::Tensor norm(const at::Tensor& x, const std::string& w) const {
    return x / at::sqrt(x.pow(2).mean(-1, true) + a.norm_eps) * P(w);
  }

  at::Tensor rope(const at::Tensor& x) const {  // [B, S, heads, E], Meta's complex formulation
    const int64_t S = x.size(1), E = x.size(3);
    auto d = at::TensorOptions().dtype(at::kDouble);
    at::Tensor freqs = at::pow(a.rope_theta, -at::arange(0, E, 2, d) / static_cast<double>(E));
    at::Tensor angles = at::outer(at::arange(S, d), freqs);  // [S, E/2]
    at::Tensor cis = at::polar(at::ones_like(angles), angles).view({1, S, 1, E / 2});
    at::Tensor xc = at::view_as_complex(x.reshape({x.size(0), S, x.size(2), E / 2, 2}).contiguous());
    return at::view_as_real(xc * cis).flatten(3);
  }

  at::Tensor block(const std::string& pre, const at::Tensor& x) const {
    const int64_t B = x.size(0), S = x.size(1), H = a.n_heads, G = a.kv_heads(), E = a.head_dim();
    at::Tensor xn = norm(x, pre + ".attention_norm.weight");
    at::Tensor q = rope(at::matmul(xn, P(pre + ".attention.wq.weight").t()).view({B, S, H, E}));
    at::Tensor k = rope(at::matmul(xn, P(pre + ".attention.wk.weight").t()).view({B, S, G, E}));
    at::Tensor v = at::matmul(xn, P(pre + ".attention.wv.weight").t()).view({B, S, G, E});
    at::Tensor causal = at::ones({S, S}, at::kBool).tril();
    std::vector<at::Tensor> heads;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      at::Tensor qh = q.select(2, h), kh = k.select(2, g), vh = v.select(2, g);  // [B, S, E]
      at::Tensor sc = at::matmul(qh, kh.transpose(1, 2)) / std::sqrt(double(E));
      sc = sc.masked_fill(causal.logical_not(), -INFINITY);
      heads.push_back(at::matmul(at::softmax(sc, -1), vh));
    }
    at::Tensor o = at::stack(heads, 2).reshape({B, S, H * E});
    at::Tensor hres = x + at::matmul(o, P(pre + ".attention.wo.weight").t());
    at::Tensor f = norm(hres, pre + ".ffn_norm.weight");
    at::Tensor g1 = at::matmul(f, P(pre + ".feed_forward.w1.weight").t());
    at::Tensor g3 = at::matmul(f, P(pre + ".feed_forward.w3.weight").t());
    return hres + at::matmul(g1 * at::sigmoid(g1) * g3, P(pre + ".feed_forward.w2.weight").t());
  }

  at::Tensor logits(const at::Tensor& tokens) const {  // [B, S, K, V]
    at::Tensor h = P("tok_embeddings.weight").index_select(0, tokens.flatten());
    h = h.view({tokens.size(0), tokens.size(1), -1});
    for (int64_t i = 0; i < a.n_trunk_blocks(); ++i) h = block("layers." + std::to_string(i), h);
    std::vector<at::Tensor> out;
    for (int64_t k = 0; k < a.n_future_tokens; ++k) {
      std::string pre = k == 0 ? "layers." + std::to_string(a.n_trunk_blocks())
                               : "extra_heads." + std::to_string(k - 1);
      out.push_back(at::matmul(norm(block(pre, h), "norm.weight"), P("output.weight").t()));
    }
    return at::stack(out, 2);
  }
};

TEST(Transformer, MatchesIndependentReference) {
  ModelArgs a = tiny_args(2, 3);
  MtpModel m(a);
  auto init = m.init_params(11);
  LocalParams src(m.param_specs(), init);
  at::Tensor tokens = test::random_tokens(2, 12, a.vocab_size, 5);
  at::Tensor logits = m.forward_logits(src, tokens, {});
  ASSERT_EQ(logits.sizes(), at::IntArrayRef({2, 12, 3, a.vocab_size}));
  at::Tensor ref = Reference{a, init}.logits(tokens);
  EXPECT_LT(test::rel_diff(logits, ref), 1e-5);

  // Head 0 only and the final-normed hidden state are the same computation restricted.
  at::Tensor head0 = m.forward_logits(src, tokens, {}, /*all_heads=*/false);
  ASSERT_EQ(head0.size(2), 1);
  EXPECT_LT(test::rel_diff(head0.select(2, 0), logits.select(2, 0)), 1e-6);
  at::Tensor hidden = m.forward_hidden(src, tokens, {});
  at::Tensor via_hidden = at::matmul(hidden, init.at("output.weight").t());
  EXPECT_LT(test::rel_diff(via_hidden, logits.select(2, 0)), 1e-6);
}

TEST(Transformer, Causal) {
  ModelArgs a = tiny_args(2, 3);
  MtpModel m(a);
  LocalParams src = test::make_local(m, 3);
  at::Tensor tokens = test::random_tokens(2, 16, a.vocab_size, 9);
  at::Tensor changed = tokens.clone();
  const int64_t t = 6;
  changed.narrow(1, t + 1, 16 - t - 1).copy_(test::random_tokens(2, 16 - t - 1, a.vocab_size, 77));
  ASSERT_FALSE(at::equal(tokens, changed));
  at::Tensor l1 = m.forward_logits(src, tokens, {}), l2 = m.forward_logits(src, changed, {});
  EXPECT_LT(test::rel_diff(l1.narrow(1, 0, t + 1), l2.narrow(1, 0, t + 1)), 1e-6);
  EXPECT_GT(test::rel_diff(l1.narrow(1, t + 1, 1), l2.narrow(1, t + 1, 1)), 1e-3);  // the change is visible after t
}

TEST(Transformer, GqaEqualsExplicitHeadRepetition) {
  ModelArgs gqa = tiny_args(1, 2);  // 4 query heads over 2 kv heads
  ModelArgs mha = gqa;
  mha.n_kv_heads = gqa.n_heads;
  MtpModel mg(gqa), mm(mha);
  auto pg = mg.init_params(21);
  auto pm = pg;
  const int64_t rep = gqa.n_heads / gqa.kv_heads(), E = gqa.head_dim();
  for (auto& kv : pm) {
    const std::string& n = kv.first;
    if (n.find("attention.wk.") != std::string::npos || n.find("attention.wv.") != std::string::npos)
      kv.second =
          kv.second.view({gqa.kv_heads(), E, gqa.dim}).repeat_interleave(rep, 0).reshape({gqa.n_heads * E, gqa.dim});
  }
  LocalParams sg(mg.param_specs(), pg), sm(mm.param_specs(), pm);
  at::Tensor tokens = test::random_tokens(2, 10, gqa.vocab_size, 4);
  EXPECT_LT(test::rel_diff(mg.forward_logits(sg, tokens, {}), mm.forward_logits(sm, tokens, {})), 1e-6);
}

TEST(Transformer, RopeMatchesComplexFormAndIsRelative) {
  const int64_t S = 20, E = 16;
  RopeTable rope = make_rope_table(E, S, 10000.0, at::Device(at::kCPU));
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(3);
  at::Tensor x = at::randn({1, S, 2, E}, g, at::TensorOptions().dtype(at::kFloat));
  ModelArgs a;
  a.rope_theta = 10000.0;
  std::unordered_map<std::string, at::Tensor> none;
  at::Tensor ref = Reference{a, none}.rope(x.to(at::kDouble));
  EXPECT_LT(test::rel_diff(apply_rope(x, rope), ref), 1e-6);

  // The same q and k vectors at every position: q(m) . k(n) must depend on m - n only.
  at::Tensor q = at::randn({E}, g).view({1, 1, 1, E}).expand({1, S, 1, E}).contiguous();
  at::Tensor k = at::randn({E}, g).view({1, 1, 1, E}).expand({1, S, 1, E}).contiguous();
  at::Tensor qr = apply_rope(q, rope).view({S, E}), kr = apply_rope(k, rope).view({S, E});
  at::Tensor scores = at::matmul(qr, kr.t());  // [m, n]
  double worst = 0, spread = 0;
  for (int64_t d = -5; d <= 5; ++d) {
    const double base = scores[8][8 - d].item<double>();
    for (int64_t m = std::max<int64_t>(0, d); m < S && m - d < S; ++m) {
      worst = std::max(worst, std::abs(scores[m][m - d].item<double>() - base));
    }
    spread = std::max(spread, std::abs(base - scores[8][8].item<double>()));
  }
  EXPECT_LT(worst, 1e-4);
  EXPECT_GT(spread, 1e-2);  // and it does depend on the offset
}

TEST(Transformer, RmsNormUpcastsAndCastsBack) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(8);
  at::Tensor x = (at::randn({3, 8}, g) * 30).to(at::kBFloat16);
  at::Tensor w = at::randn({8}, g).to(at::kBFloat16);
  at::Tensor y = rms_norm(x, w, 1e-5);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor expect = (xf / at::sqrt(xf.pow(2).mean(-1, true) + 1e-5)).to(at::kBFloat16) * w;
  EXPECT_TRUE(at::equal(y, expect));
}

TEST(Transformer, ParamNamesAndShapes) {
  ModelArgs a = tiny_args(2, 3);
  MtpModel m(a);
  auto specs = m.param_specs();
  EXPECT_EQ(specs.front().fqn, "tok_embeddings.weight");
  EXPECT_EQ(specs.back().fqn, "output.weight");
  std::map<std::string, ParamSpec> by;
  for (const auto& s : specs) by[s.fqn] = s;
  EXPECT_EQ(by.at("layers.2.attention.wk.weight").shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(by.at("layers.2.attention.wk.weight").unit, "layers.2");
  EXPECT_EQ(by.at("extra_heads.1.feed_forward.w2.weight").shape, (std::vector<int64_t>{32, ffn_hidden_dim(a)}));
  EXPECT_EQ(by.at("norm.weight").unit, "norm");  // its own unit: a value forward never gathers output.weight
  EXPECT_EQ(by.at("output.weight").unit, "output");
  const auto units = m.unit_names();
  ASSERT_GE(units.size(), 2u);
  EXPECT_EQ(units[units.size() - 2], "norm");
  EXPECT_EQ(units.back(), "output");
  EXPECT_EQ(by.count("layers.3.attention.wq.weight"), 0u);  // 2 trunk + head 0 = layers.0..2
  EXPECT_EQ(m.head_unit(0), "layers.2");
  EXPECT_EQ(m.head_unit(2), "extra_heads.1");
  EXPECT_EQ(specs.size(), 3u + 5u * 9u);
  // Initialization depends on (seed, FQN) only.
  auto p1 = m.init_params(5), p2 = MtpModel(a).init_params(5), p3 = m.init_params(6);
  for (const auto& kv : p1) EXPECT_TRUE(at::equal(kv.second, p2.at(kv.first))) << kv.first;
  EXPECT_FALSE(at::equal(p1.at("output.weight"), p3.at("output.weight")));
}

}  // namespace
}  // namespace wmtp

namespace wmtp {
namespace {

TEST(Transformer, AttentionTablesAreBuiltOncePerDeviceAndSliceExactly) {
  ModelArgs a = test::tiny_args(2, 3);
  MtpModel m(a);
  LocalParams src = test::make_local(m, 3);
  at::Tensor tokens = test::random_tokens(2, 12, a.vocab_size, 4);
  {
    c10::NoGradGuard no_grad;
    m.forward_logits(src, tokens, ForwardOptions{});
  }
  AttentionTables& t = m.attention_tables();
  EXPECT_EQ(t.builds(), 1) << "one table for the five blocks of the forward";
  RopeTable want = make_rope_table(a.head_dim(), 7, a.rope_theta, at::kCPU);
  RopeTable got = t.rope(7, at::kCPU);  // a slice of the 12-position table
  EXPECT_TRUE(at::equal(got.cos, want.cos));
  EXPECT_TRUE(at::equal(got.sin, want.sin));
  EXPECT_EQ(t.builds(), 1);
  t.rope(20, at::kCPU);
  EXPECT_EQ(t.builds(), 2) << "a longer sequence grows the table";
  at::Tensor mask = t.causal_mask(5, at::kCPU);
  at::Tensor expect = at::full({5, 5}, -INFINITY).triu(1);
  EXPECT_TRUE(at::equal(mask, expect));
}

TEST(Transformer, CausalAttentionPathsAgree) {
  // causal_attention is at::scaled_dot_product_attention on LibTorch >= 2 and the explicit path on
  // 1.13; both against the explicit path with and without the cached mask.
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(5);
  at::Tensor q = at::randn({2, 9, 4, 8}, g), k = at::randn({2, 9, 4, 8}, g), v = at::randn({2, 9, 4, 8}, g);
  // double precision, written out: [B, H, S, S] scores, -inf above the diagonal, softmax, @ v
  at::Tensor qd = q.to(at::kDouble).transpose(1, 2), kd = k.to(at::kDouble).transpose(1, 2);
  at::Tensor sc = at::matmul(qd, kd.transpose(2, 3)) / std::sqrt(8.0);
  sc = sc.masked_fill(at::ones({9, 9}, at::kBool).tril().logical_not(), -INFINITY);
  at::Tensor ref = at::matmul(at::softmax(sc, -1), v.to(at::kDouble).transpose(1, 2)).transpose(1, 2);
  AttentionTables tables(8, 10000.0);
  at::Tensor explicit_masked = causal_attention_explicit(q, k, v, tables.causal_mask(9, at::kCPU));
  EXPECT_TRUE(at::equal(explicit_masked, causal_attention_explicit(q, k, v)));
  EXPECT_LE(test::rel_diff(causal_attention(q, k, v), ref), 1e-5) << (kFusedAttention ? "fused" : "explicit");
}

}  // namespace
}  // namespace wmtp
