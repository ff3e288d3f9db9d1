// flat_range_blocks: for every range of many small shapes, the blocks tile exactly [begin, end)
// (checked against a direct element-by-element marking), in increasing order, at most 2n-1 of them.
#include <gtest/gtest.h>

#include <vector>

#include "ckpt/flat_range.h"
#include "core/error.h"

namespace wmtp {
namespace {

// Row-major flat index of every element inside a block, in block iteration order.
std::vector<int64_t> block_elements(const std::vector<int64_t>& shape, const FlatBlock& b) {
  std::vector<int64_t> out;
  if (shape.empty()) return {0};
  std::vector<int64_t> idx(shape.size(), 0);
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + b.start[d] + idx[d];
    out.push_back(flat);
    size_t d = shape.size();
    while (d > 0) {
      --d;
      if (++idx[d] < b.count[d]) break;
      idx[d] = 0;
      if (d == 0) return out;
    }
  }
}

TEST(FlatRange, BlocksTileEveryRangeExactly) {
  const std::vector<std::vector<int64_t>> shapes = {{},     {1},       {7},       {3, 4},       {1, 5},
                                                    {5, 1}, {2, 3, 4}, {3, 1, 2}, {2, 2, 3, 2}, {4, 3, 2, 1, 2}};
  int checked = 0;
  for (const auto& shape : shapes) {
    const int64_t n = shape_numel(shape);
    for (int64_t b = 0; b <= n; ++b) {
      for (int64_t e = b; e <= n; ++e) {
        auto blocks = flat_range_blocks(shape, b, e);
        EXPECT_LE(blocks.size(), shape.empty() ? 1u : 2 * shape.size() - 1);
        std::vector<int64_t> got;
        for (const auto& blk : blocks) {
          ASSERT_EQ(blk.start.size(), shape.size());
          for (size_t d = 0; d < shape.size(); ++d) {
            ASSERT_GE(blk.count[d], 1);
            ASSERT_LE(blk.start[d] + blk.count[d], shape[d]);
          }
          auto els = block_elements(shape, blk);
          got.insert(got.end(), els.begin(), els.end());
        }
        std::vector<int64_t> want;
        for (int64_t i = b; i < e; ++i) want.push_back(i);
        ASSERT_EQ(got, want) << "shape " << shape_to_string(shape) << " range [" << b << ", " << e << ")";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(FlatRange, RejectsRangesOutsideTheTensor) {
  EXPECT_THROW(flat_range_blocks({3, 4}, 5, 13), Error);
  EXPECT_THROW(flat_range_blocks({3, 4}, 6, 5), Error);
  EXPECT_THROW(flat_range_blocks({3, 4}, -1, 2), Error);
}

}  // namespace
}  // namespace wmtp
