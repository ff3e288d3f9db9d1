// Shared helpers for the checkpoint tests: deterministic tensor contents from (name, flat index),
// so every rank computes expected values for any range locally; partitions of flat ranges across
// ranks (engine-like padded flat layout, uneven per-tensor splits, interleaved multi-piece).
#pragma once
#include <ATen/ATen.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "ckpt/checkpoint.h"

namespace wmtp::test {

// Finite float32 values with varied bit patterns; `salt` separates model / exp_avg / exp_avg_sq.
at::Tensor pattern_values(const std::string& name, int64_t begin, int64_t end, uint64_t salt);
at::Tensor pattern_tensor(const TensorSpec& spec, uint64_t salt);  // whole tensor, shaped

// Engine: the sharding engine's padded flat layout; Uneven: per-tensor cuts, some ranks empty;
// Interleaved: several pieces of a tensor per rank; Replicated: every rank everything (no_shard);
// Partial: only the first half of each tensor, split like Engine (the rest is read by nobody).
enum class Layout { Engine, Uneven, Interleaved, Replicated, Partial };
const char* layout_name(Layout l);
// The ranges [begin, end) of each spec that `rank` of `world` owns under `layout` (may be empty).
struct Range {
  size_t spec;
  int64_t begin, end;
};
std::vector<Range> owned_ranges(const std::vector<TensorSpec>& specs, Layout layout, int rank, int world);

// Pieces with data filled from pattern_values (for writing) or zero-filled views into one flat
// buffer (for reading; `buffer` keeps the storage alive).
std::vector<TensorPiece> make_pieces(const std::vector<TensorSpec>& specs, const std::vector<Range>& ranges,
                                     uint64_t salt);
std::vector<TensorPiece> make_empty_pieces(const std::vector<TensorSpec>& specs, const std::vector<Range>& ranges,
                                           at::Tensor& buffer);

// Bitwise equality of float32 tensors (NaN-safe).
bool bitwise_equal(const at::Tensor& a, const at::Tensor& b);

}  // namespace wmtp::test
