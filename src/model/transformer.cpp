// LLaMA block functions: RMSNorm, RoPE, GQA causal attention, SwiGLU, pre-norm block.
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace wmtp {

namespace {
struct EmbeddingFn : public torch::autograd::Function<EmbeddingFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& tokens) {
    ctx->save_for_backward({tokens});
    ctx->saved_data["rows"] = weight.size(0);
    return at::embedding(weight, tokens);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor tokens = ctx->get_saved_variables()[0];
    at::Tensor g = at::embedding_backward(grads[0], tokens, ctx->saved_data["rows"].toInt(), /*padding_idx=*/-1,
                                          /*scale_grad_by_freq=*/false, /*sparse=*/false);
    return {g, at::Tensor()};
  }
};
}  // namespace

at::Tensor embed_tokens(const at::Tensor& weight, const at::Tensor& tokens) {
  if (!weight.requires_grad() || !c10::GradMode::is_enabled()) return at::embedding(weight, tokens);
  return EmbeddingFn::apply(weight, tokens);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

RopeTable make_rope_table(int64_t head_dim, int64_t seq_len, double theta, const at::Device& device) {
  auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  // Meta: freqs = 1.0 / (theta ** (arange(0, dim, 2)[: dim // 2].float() / dim)), all in fp32.
  at::Tensor exponents = at::arange(0, head_dim, 2, f32).slice(0, 0, head_dim / 2) / static_cast<double>(head_dim);
  at::Tensor freqs = at::reciprocal(at::pow(static_cast<float>(theta), exponents));
  at::Tensor t = at::arange(seq_len, f32);
  at::Tensor angles = at::outer(t, freqs);  // [S, E/2]
  at::Tensor c = at::cos(angles), sn = at::sin(angles);
  return RopeTable{c, sn, at::complex(c, sn)};
}

AttentionTables::Entry& AttentionTables::entry(int64_t seq_len, const at::Device& device) {
  for (Entry& e : entries_)
    if (e.device == device) {
      if (e.rope.cos.size(0) >= seq_len) return e;
      e.rope = make_rope_table(head_dim_, seq_len, theta_, device);
      e.mask = at::Tensor();
      ++builds_;
      return e;
    }
  entries_.push_back(Entry{device, make_rope_table(head_dim_, seq_len, theta_, device), at::Tensor()});
  ++builds_;
  return entries_.back();
}

RopeTable AttentionTables::rope(int64_t seq_len, const at::Device& device) {
  std::lock_guard<std::mutex> lock(mu_);
  const RopeTable& t = entry(seq_len, device).rope;
  return RopeTable{t.cos.slice(0, 0, seq_len), t.sin.slice(0, 0, seq_len), t.cis.slice(0, 0, seq_len)};
}

at::Tensor AttentionTables::causal_mask(int64_t seq_len, const at::Device& device) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(seq_len, device);
  const int64_t n = e.rope.cos.size(0);
  if (!e.mask.defined())
    e.mask = at::full({n, n}, -std::numeric_limits<float>::infinity(),
                      at::TensorOptions().dtype(at::kFloat).device(device))
                 .triu(1);
  return e.mask.slice(0, 0, seq_len).slice(1, 0, seq_len);
}

int64_t AttentionTables::builds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return builds_;
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTable& rope) {
  const int64_t S = x.size(1);
  const bool per_row = rope.cis.dim() == 3;
  WMTP_CHECK(per_row ? rope.cis.size(0) == x.size(0) && rope.cis.size(1) == S : rope.cis.size(0) >= S, "RoPE table ",
             rope.cis.sizes(), " for ", S, " positions of ", x.size(0), " rows");
  at::Tensor xc = at::view_as_complex(x.to(at::kFloat).reshape({x.size(0), S, x.size(2), x.size(3) / 2, 2}));
  // [S, E/2] -> [1, S, 1, E/2] (or [B, S, E/2] -> [B, S, 1, E/2]) to broadcast over batch and heads.
  at::Tensor cis = per_row ? rope.cis.unsqueeze(2) : rope.cis.slice(0, 0, S).unsqueeze(0).unsqueeze(2);
  return at::view_as_real(xc * cis).flatten(3).to(x.scalar_type());
}

at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t B = x.size(0), S = x.size(1), G = x.size(2), E = x.size(3);
  return x.unsqueeze(3).expand({B, S, G, n_rep, E}).reshape({B, S, G * n_rep, E});
}

#if TORCH_VERSION_MAJOR >= 2
const bool kFusedAttention = true;
#else
const bool kFusedAttention = false;
#endif

at::Tensor causal_attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& mask) {
  const int64_t B = q.size(0), S = q.size(1), H = q.size(2), E = q.size(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(E));
  // [B * H, S, E] batches of heads
  at::Tensor qb = q.transpose(1, 2).reshape({B * H, S, E}), kb = k.transpose(1, 2).reshape({B * H, S, E});
  at::Tensor vb = v.transpose(1, 2).reshape({B * H, S, E});
  at::Tensor m = mask.defined() ? mask.slice(0, 0, S).slice(1, 0, S)
                                : at::full({S, S}, -std::numeric_limits<float>::infinity(),
                                           at::TensorOptions().dtype(at::kFloat).device(q.device()))
                                      .triu(1);
  at::Tensor scores;
  if (q.scalar_type() == at::kFloat) {
    // mask + scale * q k^T in the GEMM itself (its beta and alpha): no pass over the [S, S] scores
    // to scale them and none to add the mask, forward or backward.
    scores = at::baddbmm(m.expand({B * H, S, S}), qb, kb.transpose(1, 2), /*beta=*/1, /*alpha=*/scale);
  } else {
    scores = (at::bmm(qb, kb.transpose(1, 2)) / std::sqrt(static_cast<double>(E))).to(at::kFloat) + m;
  }
  at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
  return at::bmm(probs, vb).view({B, H, S, E}).transpose(1, 2);  // [B, S, H, E]
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
#if TORCH_VERSION_MAJOR >= 2
  (void)mask;
  // Causal with right padding only: padded positions come after every real one, so the causal mask
  // alone keeps them out of real positions' attention. Default scale 1/sqrt(E).
  at::Tensor o = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  /*attn_mask=*/c10::nullopt, /*dropout_p=*/0.0, /*is_causal=*/true);
  return o.transpose(1, 2);  // [B, S, H, E]
#else
  return causal_attention_explicit(q, k, v, mask);
#endif
}

namespace {
at::Tensor find_or_undefined(const UnitParams& p, const std::string& key) {
  auto it = p.find(key);
  return it == p.end() ? at::Tensor() : it->second;
}

const at::Tensor& need(const UnitParams& p, const std::string& key) {
  auto it = p.find(key);
  WMTP_CHECK(it != p.end(), "parameter '", key, "' missing from its unit");
  return it->second;
}

at::Tensor project(const UnitParams& p, const std::string& stem, const at::Tensor& x, const BlockContext& ctx) {
  return lora_linear(x, need(p, stem + ".weight"), find_or_undefined(p, stem + ".lora_A"),
                     find_or_undefined(p, stem + ".lora_B"), ctx.lora_scaling, ctx.lora_dropout, ctx.training);
}
}  // namespace

at::Tensor block_forward(const UnitParams& p, const std::string& prefix, const at::Tensor& x, const BlockContext& ctx) {
  const ModelArgs& a = *ctx.args;
  const int64_t B = x.size(0), S = x.size(1), H = a.n_heads, G = a.kv_heads(), E = a.head_dim();
  const std::string attn = prefix + ".attention.", ffn = prefix + ".feed_forward.";

  at::Tensor xn = rms_norm(x, need(p, prefix + ".attention_norm.weight"), a.norm_eps);
  at::Tensor q = project(p, attn + "wq", xn, ctx).view({B, S, H, E});
  at::Tensor k = project(p, attn + "wk", xn, ctx).view({B, S, G, E});
  at::Tensor v = project(p, attn + "wv", xn, ctx).view({B, S, G, E});
  q = apply_rope(q, *ctx.rope);
  k = apply_rope(k, *ctx.rope);
  at::Tensor o = (ctx.attend ? ctx.attend(q, k, v)
                             : causal_attention(q, repeat_kv(k, H / G), repeat_kv(v, H / G), ctx.causal_mask))
                     .reshape({B, S, H * E});
  at::Tensor h = x + project(p, attn + "wo", o, ctx);

  at::Tensor f = rms_norm(h, need(p, prefix + ".ffn_norm.weight"), a.norm_eps);
  at::Tensor gate = at::silu(project(p, ffn + "w1", f, ctx)) * project(p, ffn + "w3", f, ctx);
  return h + project(p, ffn + "w2", gate, ctx);
}

}  // namespace wmtp
