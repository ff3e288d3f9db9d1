// Decoding with a KV cache: the keys and values of every block of an MtpModel — the trunk's blocks
// and each head's block (every head is a full transformer block reading the trunk output, so each
// needs its own cache of all earlier positions) — in buffers preallocated for `capacity` positions.
// Rolling back (self-speculative decoding's rejected drafts) is lowering the lengths: later entries
// are overwritten by the next forward. Inference only (no autograd, no dropout); the block is
// transformer.h's block_forward with RoPE at the cached positions and attention over the cache.
//
// Every row of a batch has its own length (rows of a batched self-speculative decode accept
// different numbers of drafts; prompts differ in length). A forward feeds T tokens per row: row b's
// token i goes to slot lens[b] + i, at RoPE position lens[b] + i, and attends to the row's slots
// 0 .. lens[b] + i. A row with fewer than T real tokens fills its tail with any token: those slots
// lie past what the row keeps (the caller lowers its length to its real tokens, truncate) and are
// overwritten later; the buffers hold n_future - 1 slots past `capacity` for such a tail.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/mtp.h"
#include "model/param_source.h"

namespace wmtp {

// One block's keys (after RoPE) and values, [B, G, slots, E] (each row's kv heads contiguous over
// the slots: attention reads them as [B * G, keys, E] without a copy); row b holds positions [0, lens[b]).
struct BlockKvCache {
  at::Tensor k, v;
  std::vector<int64_t> lens;
};

// What every block of one forward shares: where its T tokens per row go, their RoPE angles and the
// attention mask. Built once per forward (the first block to run with these lengths builds it).
struct CachedPositions {
  std::vector<int64_t> lens;  // the rows' lengths before the forward
  int64_t tokens = 0;         // T
  int64_t keys = 0;           // slots attended: [0, max(lens) + T)
  bool uniform = true;        // every row at the same length: slices instead of per-row tables
  at::Tensor cis;             // RoPE [T, E/2], or per row [B, T, E/2]
  at::Tensor mask;            // additive fp32 [1 (uniform) or B * G, R * T, keys], R = query heads per kv head;
                              // undefined: none (uniform, T = 1)
  at::Tensor
      write_index;  // not uniform: [B * T * G] flat slot ((row * G + g) * slots + lens[row] + i) of each new entry
};

struct DecodeCache {
  std::vector<BlockKvCache> trunk;  // layers.0 .. layers.{n_trunk-1}
  std::vector<BlockKvCache> heads;  // head k's block (layers.{n_trunk} for k = 0, extra_heads.{k-1})
  CachedPositions positions;        // the last forward's (reused by each of its blocks)
  int64_t max_positions = 0;        // capacity: positions a row may keep

  int64_t batch() const;
  int64_t capacity() const { return max_positions; }
  const std::vector<int64_t>& lens() const;  // per row, the positions the trunk holds
  int64_t len() const;                       // the rows' one length (Error when rows differ)
  // Forget every position from `len` (one for all rows, or one per row) on, in every block.
  void truncate(int64_t len);
  void truncate(const std::vector<int64_t>& lens);
  // Keeps rows `rows` (ascending indices into the batch) in that order: finished rows leave the batch.
  void keep_rows(const std::vector<int64_t>& rows);
};

// Zero-length caches for the trunk and heads 0 .. n_heads-1 (-1: every head) of `model`, in `dtype`
// (the dtype the source computes in) on `device`. capacity <= max_seq_len (Error(Usage) otherwise).
DecodeCache make_decode_cache(const MtpModel& model, int64_t batch, int64_t capacity, at::ScalarType dtype,
                              const at::Device& device, int64_t n_heads = -1);

// tokens [B, T] at each row's next T positions -> z [B, T, D]; the trunk caches advance by T.
at::Tensor forward_trunk_cached(const MtpModel& model, ParamSource& src, const at::Tensor& tokens, DecodeCache& cache);
// Head k's block on z at the same positions; head k's cache advances by T.
at::Tensor forward_head_block_cached(const MtpModel& model, ParamSource& src, int64_t head, const at::Tensor& z,
                                     DecodeCache& cache);

}  // namespace wmtp
