// Helpers for the checkpoint tests (see ckpt_test_util.h).
#include "ckpt_test_util.h"

#include <algorithm>
#include <cstring>

#include "ckpt/checksum.h"
#include "ckpt/flat_range.h"
#include "test_util.h"

namespace wmtp::test {

namespace {
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

at::Tensor pattern_values(const std::string& name, int64_t begin, int64_t end, uint64_t salt) {
  at::Tensor t = at::empty({end - begin}, at::kFloat);
  float* p = t.data_ptr<float>();
  const uint64_t h = fnv1a64(name) ^ (salt * 0x51ed2701ULL);
  for (int64_t i = begin; i < end; ++i) {
    uint64_t r = mix(h + uint64_t(i));
    // sign, an exponent in [2^-20, 2^7), full random mantissa: every bit of the float matters.
    uint32_t bits = uint32_t(r & 0x807FFFFFu) | (uint32_t(107 + (r >> 40) % 27) << 23);
    std::memcpy(&p[i - begin], &bits, 4);
  }
  return t;
}

at::Tensor pattern_tensor(const TensorSpec& spec, uint64_t salt) {
  return pattern_values(spec.name, 0, shape_numel(spec.shape), salt).reshape(spec.shape);
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Engine: return "engine";
    case Layout::Uneven: return "uneven";
    case Layout::Interleaved: return "interleaved";
    case Layout::Replicated: return "replicated";
    case Layout::Partial: return "partial";
  }
  return "?";
}

std::vector<Range> owned_ranges(const std::vector<TensorSpec>& specs, Layout layout, int rank, int world) {
  std::vector<Range> out;
  if (layout == Layout::Engine) {
    // Concatenate every tensor, pad to a multiple of world, rank r owns [r*per, (r+1)*per).
    int64_t total = 0;
    for (const auto& s : specs) total += shape_numel(s.shape);
    const int64_t per = (total + world - 1) / world;
    const int64_t lo = per * rank, hi = per * (rank + 1);
    int64_t base = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t n = shape_numel(specs[i].shape);
      const int64_t b = std::clamp(lo - base, int64_t(0), n), e = std::clamp(hi - base, int64_t(0), n);
      if (e > b) out.push_back({i, b, e});
      base += n;
    }
  } else if (layout == Layout::Uneven) {
    // Per tensor: cut points drawn from the tensor's name; some ranks get nothing.
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t n = shape_numel(specs[i].shape);
      std::vector<int64_t> cuts = {0, n};
      for (int k = 1; k < world; ++k) cuts.push_back(int64_t(mix(fnv1a64(specs[i].name) + k) % uint64_t(n + 1)));
      std::sort(cuts.begin(), cuts.end());
      if (cuts[rank + 1] > cuts[rank]) out.push_back({i, cuts[rank], cuts[rank + 1]});
    }
  } else if (layout == Layout::Replicated) {
    for (size_t i = 0; i < specs.size(); ++i)
      if (shape_numel(specs[i].shape) > 0) out.push_back({i, 0, shape_numel(specs[i].shape)});
  } else if (layout == Layout::Partial) {
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t half = shape_numel(specs[i].shape) / 2, per = (half + world - 1) / world;
      const int64_t b = std::min(half, per * rank), e = std::min(half, b + per);
      if (e > b) out.push_back({i, b, e});
    }
  } else {
    // Chunks of 5 elements dealt round-robin: several pieces of one tensor per rank.
    for (size_t i = 0; i < specs.size(); ++i) {
      const int64_t n = shape_numel(specs[i].shape);
      for (int64_t b = 5 * rank; b < n; b += 5 * world) out.push_back({i, b, std::min(n, b + 5)});
    }
  }
  return out;
}

std::vector<TensorPiece> make_pieces(const std::vector<TensorSpec>& specs, const std::vector<Range>& ranges,
                                     uint64_t salt) {
  std::vector<TensorPiece> out;
  for (const Range& r : ranges)
    out.push_back({specs[r.spec].name, r.begin, pattern_values(specs[r.spec].name, r.begin, r.end, salt)});
  return out;
}

std::vector<TensorPiece> make_empty_pieces(const std::vector<TensorSpec>& specs, const std::vector<Range>& ranges,
                                           at::Tensor& buffer) {
  int64_t total = 0;
  for (const Range& r : ranges) total += r.end - r.begin;
  buffer = at::zeros({total}, at::kFloat);
  std::vector<TensorPiece> out;
  int64_t pos = 0;
  for (const Range& r : ranges) {
    out.push_back({specs[r.spec].name, r.begin, buffer.narrow(0, pos, r.end - r.begin)});
    pos += r.end - r.begin;
  }
  return out;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) == 0;
}

}  // namespace wmtp::test
