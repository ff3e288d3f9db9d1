// The LLaMA block as pure functions over tensors handed in by the caller (docs/model.md, Meta's
// llama/model.py): RMSNorm, interleaved-pair RoPE, causal grouped-query attention, SwiGLU FFN and
// the pre-norm block. Nothing here owns weights; the compute dtype is the weights' dtype.
// Shapes: B batch, S sequence, D dim, H heads, G kv heads, E head_dim.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "model/lora.h"
#include "model/model_args.h"
#include "model/param_source.h"

namespace wmtp {

// at::embedding(weight, tokens) whose autograd node keeps only the tokens (and the row count), not
// the weight: the embedding's backward needs no weight values, so an engine that frees the gathered
// weight after forward never has to gather it again. The gradient is at::embedding_backward's (the
// same kernel, bit for bit).
at::Tensor embed_tokens(const at::Tensor& weight, const at::Tensor& tokens);

// x * rsqrt(mean(x^2) + eps) computed in fp32, cast back to x's dtype, times weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// RoPE angles for positions [0, seq_len): cos and sin, each [S, E/2] fp32, and cis = cos + i sin
// [S, E/2] complex64 (Meta's freqs_cis). Frequencies theta^(-2i/E) computed in fp32 exactly as
// Meta's precompute_freqs_cis.
struct RopeTable {
  at::Tensor cos, sin, cis;
};
RopeTable make_rope_table(int64_t head_dim, int64_t seq_len, double theta, const at::Device& device);

// What every block of a forward shares and nothing needs to rebuild: the RoPE table (and, for the
// explicit attention path, the additive causal mask), built once per device for the longest length
// asked so far; shorter lengths get leading slices (the same values: each entry depends on its
// position only). Thread-safe: the forward and the recompute inside backward may both ask.
class AttentionTables {
 public:
  AttentionTables(int64_t head_dim, double theta) : head_dim_(head_dim), theta_(theta) {}
  AttentionTables(const AttentionTables&) = delete;
  AttentionTables& operator=(const AttentionTables&) = delete;
  RopeTable rope(int64_t seq_len, const at::Device& device);
  // [S, S] fp32: 0 on and below the diagonal, -inf above.
  at::Tensor causal_mask(int64_t seq_len, const at::Device& device);
  int64_t builds() const;  // tables built so far (tests: one per device and growth)

 private:
  struct Entry {
    at::Device device;
    RopeTable rope;
    at::Tensor mask;
  };
  Entry& entry(int64_t seq_len, const at::Device& device);

  int64_t head_dim_;
  double theta_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  int64_t builds_ = 0;
};

// Meta's interleaved convention: pairs (2j, 2j+1) of the last dim are one complex number rotated by
// angle pos * f_j; computed in fp32, returned in x's dtype. x is [B, S, heads, E]. One complex
// multiply by the table, as Meta writes it: autograd keeps only the table for backward (the
// rotation's inverse), not the input. A 3-D rope.cis [B, S, E/2] gives every row its own positions
// (batched decoding of left-padded prompts, kv_cache.h); the 2-D table is [positions >= S, E/2].
at::Tensor apply_rope(const at::Tensor& x, const RopeTable& rope);

// [B, S, G, E] -> [B, S, G*n_rep, E]; kv head g serves query heads g*n_rep .. g*n_rep+n_rep-1.
at::Tensor repeat_kv(const at::Tensor& x, int64_t n_rep);

// Causal softmax attention (fp32 softmax, scale 1/sqrt(E)); q [B,S,H,E], k/v [B,S,H,E] -> [B,S,H,E].
// With LibTorch >= 2.0 (kFusedAttention) it is at::scaled_dot_product_attention (flash /
// memory-efficient kernels on CUDA, which keep the softmax in fp32 internally); with 1.13 the explicit
// path: scores, additive mask (`mask`, or built here), fp32 softmax, probabilities @ v.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask = at::Tensor());
// The explicit path, whatever the LibTorch version (tests compare the two).
at::Tensor causal_attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& mask = at::Tensor());
extern const bool kFusedAttention;  // true when causal_attention uses scaled_dot_product_attention

// What a block needs besides its weights.
struct BlockContext {
  const ModelArgs* args = nullptr;
  double lora_scaling = 0.0;  // alpha/r; adapters are used where "<proj>.lora_A" is in the unit's params
  double lora_dropout = 0.0;
  const RopeTable* rope = nullptr;
  bool training = false;   // enables LoRA dropout
  at::Tensor causal_mask;  // [S, S] additive mask for the explicit attention path (undefined: built per call)
  // Attention of the block's q [B,S,H,E] over k, v [B,S,G,E] (after RoPE) -> [B,S,H,E]. Unset: causal
  // attention over these S positions; KV-cache decoding (kv_cache.h) appends k, v to its cache and
  // attends over everything cached, so both paths share the rest of the block.
  std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)> attend;
};

// One pre-norm block. `prefix` is "layers.3" or "extra_heads.0"; `p` holds that unit's tensors:
//   h = x + wo(attn(attention_norm(x))),  out = h + w2(silu(w1 f) * w3 f),  f = ffn_norm(h).
at::Tensor block_forward(const UnitParams& p, const std::string& prefix, const at::Tensor& x, const BlockContext& ctx);

}  // namespace wmtp
