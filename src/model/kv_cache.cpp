// KV-cache decoding: per-block key/value buffers and the cached block forward.
#include "model/kv_cache.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <utility>

#include "core/error.h"
#include "model/transformer.h"

namespace wmtp {

int64_t DecodeCache::capacity() const { return trunk.empty() ? 0 : trunk.front().k.size(1); }

int64_t DecodeCache::len() const { return trunk.empty() ? 0 : trunk.front().len; }

void DecodeCache::truncate(int64_t len) {
  auto cut = [len](std::vector<BlockKvCache>& blocks) {
    for (BlockKvCache& b : blocks) {
      WMTP_CHECK(len >= 0 && len <= b.len, "KV cache: cannot truncate ", b.len, " positions to ", len);
      b.len = len;
    }
  };
  cut(trunk);
  cut(heads);
}

DecodeCache make_decode_cache(const MtpModel& model, int64_t batch, int64_t capacity, at::ScalarType dtype,
                              const at::Device& device, int64_t n_heads) {
  const ModelArgs& a = model.args();
  if (capacity > a.max_seq_len) throw_usage("model: a decode of ", capacity, " positions exceeds max_seq_len ", a.max_seq_len);
  if (n_heads < 0) n_heads = a.n_future_tokens;
  WMTP_CHECK(n_heads <= a.n_future_tokens, "model has ", a.n_future_tokens, " heads, not ", n_heads);
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  auto one = [&] {
    return BlockKvCache{at::zeros({batch, capacity, a.kv_heads(), a.head_dim()}, opts),
                        at::zeros({batch, capacity, a.kv_heads(), a.head_dim()}, opts), 0};
  };
  DecodeCache c;
  for (int64_t i = 0; i < a.n_trunk_blocks(); ++i) c.trunk.push_back(one());
  for (int64_t i = 0; i < n_heads; ++i) c.heads.push_back(one());
  return c;
}

at::Tensor offset_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t offset,
                                   const at::Tensor& start) {
  const int64_t S = q.size(1), T = k.size(1), E = q.size(3);
  WMTP_CHECK(T == offset + S, "cached attention: ", T, " keys for ", S, " queries at offset ", offset);
  at::Tensor qb = q.transpose(1, 2), kb = k.transpose(1, 2), vb = v.transpose(1, 2);  // [B, H, *, E]
  at::Tensor scores = (at::matmul(qb, kb.transpose(2, 3)) / std::sqrt(static_cast<double>(E))).to(at::kFloat);
  if (start.defined()) {  // left padding: causal, and real queries see real keys, padding ones padding
    auto idx = at::TensorOptions().dtype(at::kLong).device(q.device());
    const at::Tensor j = at::arange(T, idx), i = at::arange(offset, offset + S, idx), st = start.view({-1, 1});
    const at::Tensor causal = j.view({1, T}) <= i.view({S, 1});                        // [S, T]
    const at::Tensor same_side = (j.view({1, 1, T}) >= st.unsqueeze(2)) == (i.view({1, S, 1}) >= st.unsqueeze(2));
    const at::Tensor allowed = causal.unsqueeze(0) & same_side;                          // [B, S, T]
    scores = scores.masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());
  } else if (S > 1) {  // a single query at the end sees every key: no mask
    scores = scores + at::full({S, T}, -std::numeric_limits<float>::infinity(),
                               at::TensorOptions().dtype(at::kFloat).device(q.device()))
                          .triu(offset + 1);
  }
  at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
  return at::matmul(probs, vb).transpose(1, 2);  // [B, S, H, E]
}

namespace {

// Appends this forward's k/v [B, S, G, E] and returns everything cached so far.
std::pair<at::Tensor, at::Tensor> extend(BlockKvCache& c, const at::Tensor& k, const at::Tensor& v) {
  const int64_t end = c.len + k.size(1);
  WMTP_CHECK(c.k.defined() && end <= c.k.size(1), "KV cache holds ", c.k.defined() ? c.k.size(1) : 0,
             " positions, need ", end);
  c.k.slice(1, c.len, end).copy_(k);
  c.v.slice(1, c.len, end).copy_(v);
  c.len = end;
  return {c.k.slice(1, 0, end), c.v.slice(1, 0, end)};
}

// block_forward (transformer.h) at positions [cache.len, cache.len + S): RoPE at those positions,
// attention over the cache after this forward's keys and values are appended.
at::Tensor block_forward_cached(const MtpModel& model, const UnitParams& p, const std::string& prefix,
                                const at::Tensor& x, BlockKvCache& cache, const at::Tensor& start) {
  const ModelArgs& a = model.args();
  const int64_t S = x.size(1), n_rep = a.n_heads / a.kv_heads();
  const int64_t offset = cache.len;
  RopeTable rope = model.attention_tables().rope(offset + S, x.device());
  at::Tensor cis = rope.cis.slice(0, offset, offset + S);
  if (start.defined()) {  // row b's slot s is position s - start[b] (padding slots: position 0)
    const at::Tensor slots = at::arange(offset, offset + S, start.options()).view({1, S});
    cis = rope.cis.index_select(0, (slots - start.view({-1, 1})).clamp_min(0).flatten()).view({x.size(0), S, -1});
  }
  RopeTable at_pos{at::Tensor(), at::Tensor(), cis};
  BlockContext ctx;
  ctx.args = &a;
  ctx.lora_scaling = model.lora().enabled ? model.lora().scaling() : 0.0;
  ctx.rope = &at_pos;
  ctx.attend = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    auto kv = extend(cache, k, v);
    return offset_causal_attention(q, repeat_kv(kv.first, n_rep), repeat_kv(kv.second, n_rep), offset, start);
  };
  return block_forward(p, prefix, x, ctx);
}

at::Tensor run_block_cached(const MtpModel& model, ParamSource& src, const std::string& unit, const at::Tensor& x,
                            BlockKvCache& cache, const at::Tensor& start) {
  UnitParams p = src.begin_unit(unit);
  at::Tensor out = block_forward_cached(model, p, unit, x, cache, start);
  src.end_unit(unit, out);
  return out;
}

}  // namespace

at::Tensor forward_trunk_cached(const MtpModel& model, ParamSource& src, const at::Tensor& tokens, DecodeCache& cache) {
  const ModelArgs& a = model.args();
  if (tokens.dim() != 2 || tokens.scalar_type() != at::kLong)
    throw_usage("model: tokens must be an int64 [B, S] tensor, got ", tokens.sizes(), " ", tokens.scalar_type());
  WMTP_CHECK(static_cast<int64_t>(cache.trunk.size()) == a.n_trunk_blocks(), "decode cache of another model");
  UnitParams emb = src.begin_unit("tok_embeddings");
  at::Tensor h = embed_tokens(emb.at("tok_embeddings.weight"), tokens);
  src.end_unit("tok_embeddings", h);
  for (int64_t i = 0; i < a.n_trunk_blocks(); ++i)
    h = run_block_cached(model, src, "layers." + std::to_string(i), h, cache.trunk[static_cast<size_t>(i)], cache.start);
  return h;
}

at::Tensor forward_head_block_cached(const MtpModel& model, ParamSource& src, int64_t head, const at::Tensor& z,
                                     DecodeCache& cache) {
  WMTP_CHECK(head >= 0 && head < static_cast<int64_t>(cache.heads.size()), "decode cache has no head ", head);
  return run_block_cached(model, src, model.head_unit(head), z, cache.heads[static_cast<size_t>(head)], cache.start);
}

}  // namespace wmtp
