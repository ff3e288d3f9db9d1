// The LLaMA block as pure functions over tensors handed in by the caller (DESIGN §3, Meta's
// llama/model.py): RMSNorm, interleaved-pair RoPE, causal grouped-query attention, SwiGLU FFN and
// the pre-norm block. Nothing here owns weights; the compute dtype is the weights' dtype.
// Shapes: B batch, S sequence, D dim, H heads, G kv heads, E head_dim.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>

#include "model/lora.h"
#include "model/model_args.h"
#include "model/param_source.h"

namespace wmtp {

// x * rsqrt(mean(x^2) + eps) computed in fp32, cast back to x's dtype, times weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// RoPE angles for positions [0, seq_len): cos and sin, each [S, E/2] fp32. Frequencies
// theta^(-2i/E) computed in fp32 exactly as Meta's precompute_freqs_cis.
struct RopeTable {
  at::Tensor cos, sin;
};
RopeTable make_rope_table(int64_t head_dim, int64_t seq_len, double theta, const at::Device& device);

// Meta's interleaved convention: pairs (2j, 2j+1) of the last dim are one complex number rotated by
// angle pos * f_j; computed in fp32, returned in x's dtype. x is [B, S, heads, E].
at::Tensor apply_rope(const at::Tensor& x, const RopeTable& rope);

// [B, S, G, E] -> [B, S, G*n_rep, E]; kv head g serves query heads g*n_rep .. g*n_rep+n_rep-1.
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep);

// Causal softmax attention (fp32 softmax, scale 1/sqrt(E)); q [B,S,H,E], k/v [B,S,H,E] -> [B,S,H,E].
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// What a block needs besides its weights.
struct BlockContext {
  const ModelArgs* args = nullptr;
  double lora_scaling = 0.0;  // alpha/r; adapters are used where "<proj>.lora_A" is in the unit's params
  double lora_dropout = 0.0;
  const RopeTable* rope = nullptr;
  bool training = false;  // enables LoRA dropout
};

// One pre-norm block. `prefix` is "layers.3" or "extra_heads.0"; `p` holds that unit's tensors:
//   h = x + wo(attn(attention_norm(x))),  out = h + w2(silu(w1 f) * w3 f),  f = ffn_norm(h).
at::Tensor block_forward(const UnitParams& p, const std::string& prefix, const at::Tensor& x,
                         const BlockContext& ctx);

}  // namespace wmtp
