// KV-cache decoding: per-block key/value buffers with per-row lengths, and the cached block forward.
#include "model/kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "core/error.h"
#include "model/transformer.h"

namespace wmtp {

namespace {
void for_each_block(DecodeCache& c, const std::function<void(BlockKvCache&)>& f) {
  for (BlockKvCache& b : c.trunk) f(b);
  for (BlockKvCache& b : c.heads) f(b);
}
}  // namespace

int64_t DecodeCache::batch() const { return static_cast<int64_t>(lens().size()); }

const std::vector<int64_t>& DecodeCache::lens() const {
  WMTP_CHECK(!trunk.empty(), "KV cache without trunk blocks");
  return trunk.front().lens;
}

int64_t DecodeCache::len() const {
  const std::vector<int64_t>& l = lens();
  WMTP_CHECK(!l.empty() && std::all_of(l.begin(), l.end(), [&](int64_t x) { return x == l.front(); }),
             "KV cache: its rows hold different numbers of positions");
  return l.front();
}

void DecodeCache::truncate(int64_t len) { truncate(std::vector<int64_t>(static_cast<size_t>(batch()), len)); }

void DecodeCache::truncate(const std::vector<int64_t>& to) {
  for_each_block(*this, [&](BlockKvCache& b) {
    WMTP_CHECK(to.size() == b.lens.size(), "KV cache: ", to.size(), " lengths for ", b.lens.size(), " rows");
    for (size_t r = 0; r < to.size(); ++r) {
      WMTP_CHECK(to[r] >= 0 && to[r] <= b.lens[r], "KV cache: cannot truncate ", b.lens[r], " positions to ", to[r]);
      b.lens[r] = to[r];
    }
  });
}

void DecodeCache::keep_rows(const std::vector<int64_t>& rows) {
  if (static_cast<int64_t>(rows.size()) == batch()) return;
  at::Tensor idx = at::tensor(rows, at::TensorOptions().dtype(at::kLong)).to(trunk.front().k.device());
  for_each_block(*this, [&](BlockKvCache& b) {
    std::vector<int64_t> lens;
    for (int64_t r : rows) {
      WMTP_CHECK(r >= 0 && r < static_cast<int64_t>(b.lens.size()), "KV cache: no row ", r);
      lens.push_back(b.lens[static_cast<size_t>(r)]);
    }
    b.k = b.k.index_select(0, idx);
    b.v = b.v.index_select(0, idx);
    b.lens = std::move(lens);
  });
}

DecodeCache make_decode_cache(const MtpModel& model, int64_t batch, int64_t capacity, at::ScalarType dtype,
                              const at::Device& device, int64_t n_heads) {
  const ModelArgs& a = model.args();
  if (capacity > a.max_seq_len)
    throw_usage("model: a decode of ", capacity, " positions exceeds max_seq_len ", a.max_seq_len);
  if (n_heads < 0) n_heads = a.n_future_tokens;
  WMTP_CHECK(n_heads <= a.n_future_tokens, "model has ", a.n_future_tokens, " heads, not ", n_heads);
  const int64_t slots = capacity + a.n_future_tokens - 1;  // a forward's padded tail past the last kept position
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  auto one = [&] {
    return BlockKvCache{at::zeros({batch, a.kv_heads(), slots, a.head_dim()}, opts),
                        at::zeros({batch, a.kv_heads(), slots, a.head_dim()}, opts),
                        std::vector<int64_t>(static_cast<size_t>(batch), 0)};
  };
  // The RoPE table for every slot now: built on demand, it would grow (and be rebuilt) at nearly every
  // forward, since each one attends to a few more positions than the last.
  model.attention_tables().rope(slots, device);
  DecodeCache c;
  c.max_positions = capacity;
  for (int64_t i = 0; i < a.n_trunk_blocks(); ++i) c.trunk.push_back(one());
  for (int64_t i = 0; i < n_heads; ++i) c.heads.push_back(one());
  return c;
}

namespace {

// The positions of a forward of T tokens per row from lengths `lens` (see CachedPositions).
CachedPositions make_positions(const MtpModel& model, const std::vector<int64_t>& lens, int64_t T, int64_t slots,
                               const at::Device& device) {
  const ModelArgs& a = model.args();
  const int64_t B = static_cast<int64_t>(lens.size()), G = a.kv_heads(), R = a.n_heads / G;
  CachedPositions p;
  p.lens = lens;
  p.tokens = T;
  const int64_t lo = *std::min_element(lens.begin(), lens.end()), hi = *std::max_element(lens.begin(), lens.end());
  p.keys = hi + T;
  p.uniform = lo == hi;
  const at::Tensor table = model.attention_tables().rope(p.keys, device).cis;
  // mask[m][(r, i)][j], m = 0 (uniform) or row * G + group: -inf where query i of the row may not
  // see slot j (j > its own slot); every query head r of a group alike.
  const int64_t M = p.uniform ? 1 : B * G;
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  std::vector<float> m(static_cast<size_t>(M * R * T * p.keys), 0.0f);
  for (int64_t x = 0; x < M; ++x)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < T; ++i) {
        float* row = m.data() + ((x * R + r) * T + i) * p.keys;
        for (int64_t j = lens[static_cast<size_t>(p.uniform ? 0 : x / G)] + i + 1; j < p.keys; ++j) row[j] = kNone;
      }
  if (!p.uniform || T > 1)  // a single query per row at one length sees every key: no mask
    p.mask = at::tensor(m, at::TensorOptions().dtype(at::kFloat)).view({M, R * T, p.keys}).to(device);
  if (p.uniform) {
    p.cis = table.slice(0, lo, lo + T);
    return p;
  }
  std::vector<int64_t> pos(static_cast<size_t>(B * T)), flat;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) {
      const int64_t slot = lens[static_cast<size_t>(b)] + i;
      pos[static_cast<size_t>(b * T + i)] = slot;
      for (int64_t g = 0; g < G; ++g) flat.push_back((b * G + g) * slots + slot);  // entry (b, i, g) of k [B, T, G, E]
    }
  auto longs = at::TensorOptions().dtype(at::kLong);
  p.cis = table.index_select(0, at::tensor(pos, longs).to(device)).view({B, T, -1});
  p.write_index = at::tensor(flat, longs).to(device);
  return p;
}

// The forward's shared positions for a block at lengths `lens`: the last forward's when they match.
const CachedPositions& positions_for(const MtpModel& model, DecodeCache& cache, const BlockKvCache& block, int64_t T) {
  CachedPositions& p = cache.positions;
  if (p.tokens != T || p.lens != block.lens || !p.cis.defined())
    p = make_positions(model, block.lens, T, block.k.size(2), block.k.device());
  return p;
}

// Appends this forward's k/v [B, T, G, E] at each row's slots; returns the slots attended as
// [B * G, keys, E] views of the cache.
std::pair<at::Tensor, at::Tensor> extend(BlockKvCache& c, const at::Tensor& k, const at::Tensor& v,
                                         const CachedPositions& p) {
  const int64_t B = k.size(0), T = k.size(1), G = k.size(2), E = k.size(3), slots = c.k.size(2);
  WMTP_CHECK(B == static_cast<int64_t>(c.lens.size()) && T == p.tokens, "KV cache: ", B, "x", T,
             " entries for a cache of ", c.lens.size(), " rows");
  WMTP_CHECK(p.keys <= slots, "KV cache holds ", slots, " positions, need ", p.keys);
  if (p.uniform) {
    const int64_t at_slot = c.lens.front();
    c.k.slice(2, at_slot, at_slot + T).copy_(k.transpose(1, 2));
    c.v.slice(2, at_slot, at_slot + T).copy_(v.transpose(1, 2));
  } else {
    c.k.view({B * G * slots, E}).index_copy_(0, p.write_index, k.reshape({B * T * G, E}));
    c.v.view({B * G * slots, E}).index_copy_(0, p.write_index, v.reshape({B * T * G, E}));
  }
  for (int64_t& l : c.lens) l += T;
  return {c.k.slice(2, 0, p.keys).reshape({B * G, p.keys, E}), c.v.slice(2, 0, p.keys).reshape({B * G, p.keys, E})};
}

// q [B, T, H, E] over the cache's keys and values [B * G, keys, E] (views, no copy) -> [B, T, H, E].
// Query head h reads kv head h / (H / G) (repeat_kv's grouping), here by folding each group's query
// heads into the rows of one product instead of copying the keys and values per query head. Scale
// 1/sqrt(E), softmax in fp32; in fp32 the mask is added in the product itself (baddbmm's beta), and
// a masked key adds an exact zero.
at::Tensor cached_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), E = q.size(3), BG = k.size(0), R = H * B / BG;
  const double scale = 1.0 / std::sqrt(static_cast<double>(E));
  at::Tensor qg = q.transpose(1, 2).reshape({BG, R * T, E});  // rows (r, t) of each (row, group)
  at::Tensor scores;
  if (q.scalar_type() == at::kFloat && mask.defined()) {
    scores = at::baddbmm(mask.expand({BG, R * T, k.size(1)}), qg, k.transpose(1, 2), /*beta=*/1, /*alpha=*/scale);
  } else {
    scores = at::bmm(qg, k.transpose(1, 2)).to(at::kFloat).mul_(scale);
    if (mask.defined()) scores.add_(mask);
  }
  at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
  return at::bmm(probs, v).view({B, H, T, E}).transpose(1, 2);
}

// block_forward (transformer.h) at the rows' next positions: RoPE there, attention over the cache
// after this forward's keys and values are appended.
at::Tensor run_block_cached(const MtpModel& model, ParamSource& src, const std::string& unit, const at::Tensor& x,
                            DecodeCache& cache, BlockKvCache& block) {
  const ModelArgs& a = model.args();
  const CachedPositions& pos = positions_for(model, cache, block, x.size(1));
  RopeTable at_pos{at::Tensor(), at::Tensor(), pos.cis};
  BlockContext ctx;
  ctx.args = &a;
  ctx.lora_scaling = model.lora().enabled ? model.lora().scaling() : 0.0;
  ctx.rope = &at_pos;
  ctx.attend = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    auto kv = extend(block, k, v, pos);
    return cached_attention(q, kv.first, kv.second, pos.mask);
  };
  UnitParams p = src.begin_unit(unit);
  at::Tensor out = block_forward(p, unit, x, ctx);
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
    h = run_block_cached(model, src, "layers." + std::to_string(i), h, cache, cache.trunk[static_cast<size_t>(i)]);
  return h;
}

at::Tensor forward_head_block_cached(const MtpModel& model, ParamSource& src, int64_t head, const at::Tensor& z,
                                     DecodeCache& cache) {
  WMTP_CHECK(head >= 0 && head < static_cast<int64_t>(cache.heads.size()), "decode cache has no head ", head);
  return run_block_cached(model, src, model.head_unit(head), z, cache, cache.heads[static_cast<size_t>(head)]);
}

}  // namespace wmtp
