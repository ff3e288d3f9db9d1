// Meta <-> HF names and the q/k rotary permutation. The permutation is checked two independent
// ways: against the row formula of docs/checkpoint-format.md ("Names"), and by its meaning — Meta's
// interleaved RoPE on Meta-layout q equals HF's rotate_half RoPE on HF-layout q, row-permuted (GQA:
// k uses n_kv_heads).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "model/model_args.h"
#include "model/mtp.h"
#include "model/names.h"
#include "core/error.h"
#include "tiny_model.h"

namespace wmtp {
namespace {

TEST(Names, MetaHfRoundTripOverEveryParameter) {
  LoraConfig lora;
  lora.enabled = true;
  lora.targets = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};
  MtpModel model(test::tiny_args(2, 2), lora);
  int hf = 0, sidecar = 0;
  for (const auto& spec : model.param_specs()) {
    if (auto h = meta_to_hf_name(spec.fqn)) {
      EXPECT_EQ(hf_to_meta_name(*h), spec.fqn);
      EXPECT_FALSE(meta_to_sidecar_name(spec.fqn));
      ++hf;
    } else {
      auto s = meta_to_sidecar_name(spec.fqn);
      ASSERT_TRUE(s) << spec.fqn << " has neither an HF nor a sidecar name";
      EXPECT_EQ(spec.fqn.rfind("extra_heads.", 0), 0u);
      EXPECT_EQ(sidecar_to_meta_name(*s), spec.fqn);
      ++sidecar;
    }
  }
  EXPECT_GT(hf, 0);
  EXPECT_GT(sidecar, 0);
}

TEST(Names, KnownPairs) {
  EXPECT_EQ(meta_to_hf_name("tok_embeddings.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(meta_to_hf_name("layers.12.attention.wk.weight"), "model.layers.12.self_attn.k_proj.weight");
  EXPECT_EQ(meta_to_hf_name("layers.0.feed_forward.w1.weight"), "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(meta_to_hf_name("layers.0.feed_forward.w2.weight"), "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(meta_to_hf_name("layers.0.feed_forward.w3.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(meta_to_hf_name("layers.3.attention_norm.weight"), "model.layers.3.input_layernorm.weight");
  EXPECT_EQ(meta_to_hf_name("layers.3.ffn_norm.weight"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(meta_to_hf_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(meta_to_hf_name("norm.weight"), "model.norm.weight");
  EXPECT_EQ(meta_to_hf_name("layers.1.attention.wq.lora_B"), "model.layers.1.self_attn.q_proj.lora_B");
  EXPECT_EQ(meta_to_sidecar_name("extra_heads.2.attention.wo.weight"), "mtp_heads.2.self_attn.o_proj.weight");
  EXPECT_FALSE(meta_to_hf_name("extra_heads.0.attention.wq.weight"));
  EXPECT_FALSE(meta_to_hf_name("value_head.mlp.0.weight"));
  EXPECT_FALSE(meta_to_hf_name("layers.x.attention.wq.weight"));
  EXPECT_FALSE(hf_to_meta_name("model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_TRUE(is_ignored_hf_name("model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_TRUE(is_ignored_meta_name("rope.freqs"));
  EXPECT_EQ(meta_target_to_hf("w2"), "down_proj");
  EXPECT_EQ(hf_target_to_meta("up_proj"), "w3");
}

TEST(Names, PermutationHeadsAreGqaAware) {
  ModelArgs a = test::tiny_args(2, 2);
  EXPECT_EQ(rotary_permutation_heads("layers.0.attention.wq.weight", a), 4);
  EXPECT_EQ(rotary_permutation_heads("layers.0.attention.wk.weight", a), 2);
  EXPECT_EQ(rotary_permutation_heads("extra_heads.0.attention.wk.weight", a), 2);
  EXPECT_EQ(rotary_permutation_heads("layers.0.attention.wq.lora_B", a), 4);
  EXPECT_EQ(rotary_permutation_heads("layers.0.attention.wq.lora_A", a), 0);
  EXPECT_EQ(rotary_permutation_heads("layers.0.attention.wv.weight", a), 0);
  EXPECT_EQ(rotary_permutation_heads("layers.0.attention.wo.weight", a), 0);
}

TEST(Names, PermutationMatchesTheRowFormula) {
  for (int64_t heads : {1, 2, 4}) {
    const int64_t head_dim = 8, half = head_dim / 2, cols = 3;
    at::Tensor w = at::arange(heads * head_dim * cols, at::kFloat).reshape({heads * head_dim, cols});
    at::Tensor hf = permute_rotary_meta_to_hf(w, heads);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < head_dim; ++i)
        EXPECT_TRUE(at::equal(hf[h * head_dim + i], w[h * head_dim + 2 * (i % half) + i / half]));
    EXPECT_TRUE(at::equal(permute_rotary_hf_to_meta(hf, heads), w));
  }
  EXPECT_THROW(permute_rotary_meta_to_hf(at::zeros({6, 2}), 4), Error);
}

// Meta RoPE: rotate interleaved pairs (2j, 2j+1) by pos * theta^(-2j/d).
at::Tensor rope_meta(const at::Tensor& q, int64_t pos, double theta) {  // q [head_dim]
  const int64_t d = q.size(0);
  at::Tensor out = q.clone();
  for (int64_t j = 0; j < d / 2; ++j) {
    double ang = pos * std::pow(theta, -2.0 * j / d);
    double a = q[2 * j].item<double>(), b = q[2 * j + 1].item<double>();
    out[2 * j] = a * std::cos(ang) - b * std::sin(ang);
    out[2 * j + 1] = a * std::sin(ang) + b * std::cos(ang);
  }
  return out;
}
// HF RoPE: q * cos + rotate_half(q) * sin with frequencies repeated over both halves.
at::Tensor rope_hf(const at::Tensor& q, int64_t pos, double theta) {
  const int64_t d = q.size(0), half = d / 2;
  at::Tensor freq = at::pow(theta, -2.0 * at::arange(half, at::kDouble) / double(d)) * double(pos);
  at::Tensor cosv = at::cat({freq.cos(), freq.cos()}), sinv = at::cat({freq.sin(), freq.sin()});
  at::Tensor rot = at::cat({-q.slice(0, half), q.slice(0, 0, half)});
  return q * cosv + rot * sinv;
}

TEST(Names, PermutationTurnsMetaRopeIntoHfRope) {
  ModelArgs a = test::tiny_args(2, 2);
  const int64_t head_dim = a.head_dim(), D = a.dim;
  at::manual_seed(3);
  at::Tensor x = at::randn({D}, at::kDouble);
  for (const char* name : {"layers.0.attention.wq.weight", "layers.0.attention.wk.weight"}) {
    const int64_t heads = rotary_permutation_heads(name, a);
    at::Tensor w_meta = at::randn({heads * head_dim, D}, at::kDouble);
    at::Tensor w_hf = permute_rotary_meta_to_hf(w_meta, heads);
    at::Tensor q_meta = at::matmul(w_meta, x), q_hf = at::matmul(w_hf, x);
    for (int64_t h = 0; h < heads; ++h) {
      at::Tensor rm = rope_meta(q_meta.slice(0, h * head_dim, (h + 1) * head_dim), 5, a.rope_theta);
      at::Tensor rh = rope_hf(q_hf.slice(0, h * head_dim, (h + 1) * head_dim), 5, a.rope_theta);
      // Same rotation, rows in HF order: permuting the Meta result must give the HF result.
      at::Tensor rm_as_hf = permute_rotary_meta_to_hf(rm.reshape({head_dim, 1}), 1).reshape({head_dim});
      EXPECT_TRUE(at::allclose(rm_as_hf, rh, 1e-12, 1e-12)) << name << " head " << h;
    }
  }
}

}  // namespace
}  // namespace wmtp
