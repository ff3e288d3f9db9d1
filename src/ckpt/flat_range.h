// Flat ranges of row-major tensors as unions of rectangular blocks (HDF5 hyperslabs).
// The sharding engine gives each rank a contiguous range [begin, end) of a parameter's flattened
// elements; an n-D dataset can only select rectangles, so the range is split into at most 2n-1 of
// them: a partial first row, a block of full rows, a partial last row (the partial rows recursively).
// Pure arithmetic, no HDF5: the checkpoint writer and reader turn the blocks into H5S_SELECT_OR calls.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace wmtp {

struct FlatBlock {
  std::vector<int64_t> start;  // one entry per dimension
  std::vector<int64_t> count;
};

// Blocks whose union is exactly elements [begin, end) of a row-major tensor of `shape`, in increasing
// flat order, pairwise disjoint. Empty when begin == end. A 0-d shape (a scalar) has one element and
// yields one block with empty start/count. Throws Error(Runtime) if the range is not inside the tensor.
std::vector<FlatBlock> flat_range_blocks(const std::vector<int64_t>& shape, int64_t begin, int64_t end);

int64_t shape_numel(const std::vector<int64_t>& shape);
// "[4, 8]" for messages.
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace wmtp
