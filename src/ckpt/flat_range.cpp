// Recursive split of a flat element range into row-major rectangles (see flat_range.h).
#include "ckpt/flat_range.h"

#include <sstream>

#include "core/error.h"

namespace wmtp {

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

namespace {

// Appends the blocks of [begin, end) within dims[d..], prefixing the fixed leading coordinates.
void split(const std::vector<int64_t>& shape, size_t d, int64_t begin, int64_t end, std::vector<int64_t>& prefix,
           std::vector<FlatBlock>& out) {
  if (begin >= end) return;
  const size_t n = shape.size();
  auto emit = [&](int64_t start_d, int64_t count_d) {
    FlatBlock b;
    b.start = prefix;
    b.count.assign(prefix.size(), 1);
    b.start.push_back(start_d);
    b.count.push_back(count_d);
    for (size_t k = d + 1; k < n; ++k) b.start.push_back(0), b.count.push_back(shape[k]);
    out.push_back(std::move(b));
  };
  if (d + 1 == n) return emit(begin, end - begin);
  int64_t row = 1;  // elements per index of dimension d
  for (size_t k = d + 1; k < n; ++k) row *= shape[k];
  int64_t first = begin / row, last = end / row;  // `last` is the row holding `end` (exclusive)
  if (first == last) {                            // inside one row: descend
    prefix.push_back(first);
    split(shape, d + 1, begin - first * row, end - first * row, prefix, out);
    prefix.pop_back();
    return;
  }
  if (begin % row != 0) {  // partial first row
    prefix.push_back(first);
    split(shape, d + 1, begin % row, row, prefix, out);
    prefix.pop_back();
    ++first;
  }
  if (last > first) emit(first, last - first);  // full rows
  if (end % row != 0) {                         // partial last row
    prefix.push_back(last);
    split(shape, d + 1, 0, end % row, prefix, out);
    prefix.pop_back();
  }
}

}  // namespace

std::vector<FlatBlock> flat_range_blocks(const std::vector<int64_t>& shape, int64_t begin, int64_t end) {
  const int64_t numel = shape_numel(shape);
  WMTP_CHECK(0 <= begin && begin <= end && end <= numel, "flat range [", begin, ", ", end,
             ") is outside a tensor of shape ", shape_to_string(shape));
  std::vector<FlatBlock> out;
  if (begin == end) return out;
  if (shape.empty()) return {FlatBlock{}};
  std::vector<int64_t> prefix;
  split(shape, 0, begin, end, prefix, out);
  return out;
}

}  // namespace wmtp
