// Dataset I/O of flat tensor ranges, shared by the checkpoint writer (checkpoint.cpp) and reader
// (checkpoint_reader.cpp); internal to ckpt/. A flat range [b, e) of a tensor's row-major
// flattening becomes an HDF5 hyperslab selection of at most 2n-1 blocks (flat_range.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum_plan.h"
#include "core/h5.h"

namespace wmtp::tensor_io {

std::string join(const std::vector<std::string>& v, const char* sep);
std::vector<std::string> split(const std::string& s, char sep);
// Hash of names and shapes: ranks check they pass the same spec list.
uint64_t specs_hash(const std::vector<TensorSpec>& specs);

H5Handle make_dataspace(const std::vector<int64_t>& shape);  // scalar for {}
// Selects the union of the (sorted, disjoint) flat ranges in `space`; returns the element count.
int64_t select_ranges(hid_t space, const std::vector<int64_t>& shape, const FlatRanges& ranges);
// A 1-D memory space of n elements (n = 0: an empty selection, as HDF5 wants a non-empty extent).
H5Handle memory_space(int64_t n);
// A rank's pieces grouped by spec index, sorted by offset, checked disjoint and in range.
std::vector<std::vector<const TensorPiece*>> pieces_by_spec(const std::vector<TensorSpec>& specs,
                                                            const std::vector<TensorPiece>& pieces);

// Reads the union of `ranges` of dataset `d` into a new contiguous 1-D tensor, in the stored dtype
// when it is float32/bfloat16 (exact), else converted to float32 by HDF5. Collective under a
// collective transfer list.
at::Tensor read_ranges(hid_t d, hid_t dxpl, const std::vector<int64_t>& shape, const FlatRanges& ranges);
// read_ranges into `dst` (contiguous float32 of the selection's size) when the dataset is float32.
// Returns false, having done nothing, for other stored types (the same answer on every rank).
bool read_ranges_into(hid_t d, hid_t dxpl, const std::vector<int64_t>& shape, const FlatRanges& ranges,
                      const at::Tensor& dst);

}  // namespace wmtp::tensor_io
