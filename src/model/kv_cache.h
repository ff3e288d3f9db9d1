// Decoding with a KV cache: the keys and values of every block of an MtpModel — the trunk's blocks
// and each head's block (every head is a full transformer block reading the trunk output, so each
// needs its own cache of all earlier positions) — in buffers preallocated for `capacity` positions.
// Rolling back (self-speculative decoding's rejected drafts) is lowering the lengths: later entries
// are overwritten by the next forward. Inference only (no autograd, no dropout); the block is
// transformer.h's block_forward with RoPE at the cached positions and attention over the cache.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/mtp.h"
#include "model/param_source.h"

namespace wmtp {

// One block's keys (after RoPE) and values, [B, capacity, G, E]; positions [0, len) filled.
struct BlockKvCache {
  at::Tensor k, v;
  int64_t len = 0;
};

// Batched decoding of prompts of different lengths left-pads them: row b's slots [0, start[b]) are
// padding, its real positions are slot - start[b] (RoPE), and its queries attend to its real slots
// only (padding slots' queries to padding only, so no row of the softmax is empty). Every row
// advances one slot per decoded token, so `len` stays one number.
struct DecodeCache {
  std::vector<BlockKvCache> trunk;  // layers.0 .. layers.{n_trunk-1}
  std::vector<BlockKvCache> heads;  // head k's block (layers.{n_trunk} for k = 0, extra_heads.{k-1})
  at::Tensor start;                 // [B] int64 on the device: each row's first real slot; undefined: 0 for all

  int64_t capacity() const;
  int64_t len() const;  // positions the trunk holds
  // Forget every position from `len` on, in every block (len <= each block's length).
  void truncate(int64_t len);
};

// Zero-length caches for the trunk and heads 0 .. n_heads-1 (-1: every head) of `model`, in `dtype`
// (the dtype the source computes in) on `device`. capacity <= max_seq_len (Error(Usage) otherwise).
DecodeCache make_decode_cache(const MtpModel& model, int64_t batch, int64_t capacity, at::ScalarType dtype,
                              const at::Device& device, int64_t n_heads = -1);

// Attention of S new queries at slots [offset, offset + S) over keys/values [0, offset + S)
// (q [B,S,H,E], k/v [B,offset+S,H,E] -> [B,S,H,E]): query i sees keys j <= offset + i, and with
// `start` ([B] int64, DecodeCache::start) in row b only keys on its side of start[b]. Scale
// 1/sqrt(E), fp32 softmax.
at::Tensor offset_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t offset,
                                   const at::Tensor& start = at::Tensor());

// tokens [B, T] at positions [cache.len(), cache.len() + T) -> z [B, T, D]; the trunk caches advance.
at::Tensor forward_trunk_cached(const MtpModel& model, ParamSource& src, const at::Tensor& tokens, DecodeCache& cache);
// Head k's block on z at the same positions; head k's cache advances.
at::Tensor forward_head_block_cached(const MtpModel& model, ParamSource& src, int64_t head, const at::Tensor& z,
                                     DecodeCache& cache);

}  // namespace wmtp
