// Dataset I/O of flat tensor ranges, shared by the checkpoint writer and reader (see tensor_io.h).
#include "ckpt/tensor_io.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "ckpt/checksum.h"
#include "ckpt/flat_range.h"
#include "core/check.h"

namespace wmtp::tensor_io {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t pos = 0;
  while (true) {
    size_t q = s.find(sep, pos);
    out.push_back(s.substr(pos, q == std::string::npos ? std::string::npos : q - pos));
    if (q == std::string::npos) break;
    pos = q + 1;
  }
  return out;
}

uint64_t specs_hash(const std::vector<TensorSpec>& specs) {
  std::string s;
  for (const auto& t : specs) s += t.name + shape_to_string(t.shape) + "\n";
  return fnv1a64(s);
}

H5Handle make_dataspace(const std::vector<int64_t>& shape) {
  if (shape.empty()) return H5Handle(WMTP_H5_CHECK(H5Screate(H5S_SCALAR)));
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return H5Handle(WMTP_H5_CHECK(H5Screate_simple(int(dims.size()), dims.data(), nullptr)));
}

// Selects the union of the (sorted, disjoint) flat ranges in `space`; returns the element count.
int64_t select_ranges(hid_t space, const std::vector<int64_t>& shape, const FlatRanges& ranges) {
  WMTP_H5_CHECK(H5Sselect_none(space));
  int64_t total = 0;
  bool first = true;
  for (auto [b, e] : ranges) {
    total += e - b;
    if (shape.empty()) {
      if (e > b) WMTP_H5_CHECK(H5Sselect_all(space));
      continue;
    }
    for (const FlatBlock& blk : flat_range_blocks(shape, b, e)) {
      std::vector<hsize_t> start(blk.start.begin(), blk.start.end()), count(blk.count.begin(), blk.count.end());
      WMTP_H5_CHECK(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(), nullptr,
                                        count.data(), nullptr));
      first = false;
    }
  }
  return total;
}

H5Handle memory_space(int64_t n) {
  hsize_t dims[1] = {hsize_t(std::max<int64_t>(n, 1))};
  H5Handle s(WMTP_H5_CHECK(H5Screate_simple(1, dims, nullptr)));
  if (n == 0) WMTP_H5_CHECK(H5Sselect_none(s));
  return s;
}

// Groups a rank's pieces by spec index, sorted by offset, checked disjoint and in range.
std::vector<std::vector<const TensorPiece*>> pieces_by_spec(const std::vector<TensorSpec>& specs,
                                                            const std::vector<TensorPiece>& pieces) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < specs.size(); ++i) index[specs[i].name] = i;
  std::vector<std::vector<const TensorPiece*>> out(specs.size());
  for (const auto& p : pieces) {
    auto it = index.find(p.name);
    WMTP_CHECK(it != index.end(), "tensor piece '", p.name, "' has no spec");
    out[it->second].push_back(&p);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    auto& v = out[i];
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    const int64_t numel = shape_numel(specs[i].shape);
    int64_t end = 0;
    for (const TensorPiece* p : v) {
      WMTP_CHECK(p->data.defined() && p->data.dim() == 1, "piece of '", p->name, "' must be a 1-D tensor");
      WMTP_CHECK(p->offset >= end, "pieces of '", p->name, "' overlap at element ", p->offset);
      end = p->offset + p->data.numel();
      WMTP_CHECK(end <= numel, "piece [", p->offset, ", ", end, ") of '", p->name, "' exceeds its ", numel,
                 " elements");
    }
  }
  return out;
}

// Reads the union of `ranges` of dataset `d` (collective) into a new contiguous 1-D tensor, in the
// stored dtype when it is float32/bfloat16 (exact), else converted to float32 by HDF5.
at::Tensor read_ranges(hid_t d, hid_t dxpl, const std::vector<int64_t>& shape, const FlatRanges& ranges) {
  H5Handle ftype(WMTP_H5_CHECK(H5Dget_type(d)));
  H5Handle bf16 = h5::bf16_type();
  const bool is_bf16 = h5::type_is_bf16(ftype);
  if (H5Tget_class(ftype) != H5T_FLOAT) throw_input("tensor is stored as ", h5::type_name(ftype), ", not a float");
  H5Handle space(WMTP_H5_CHECK(H5Dget_space(d)));
  const int64_t n = select_ranges(space, shape, ranges);
  at::Tensor out = at::empty({n}, is_bf16 ? at::kBFloat16 : at::kFloat);
  if (shape_numel(shape) == 0) return out;  // a zero-size dataset has no storage to read
  H5Handle mspace = memory_space(n);
  static float dummy = 0.f;
  void* ptr = n > 0 ? out.data_ptr() : &dummy;
  WMTP_H5_CHECK(H5Dread(d, is_bf16 ? bf16.get() : H5T_NATIVE_FLOAT, mspace, space, dxpl, ptr));
  return out;
}

// read_ranges into `dst` (contiguous float32 of the selection's size) when the dataset is float32.
// Returns false, having done nothing, for other stored types. Collective like read_ranges: every rank
// must take the same branch, which holds because the dataset type is the same for all.
bool read_ranges_into(hid_t d, hid_t dxpl, const std::vector<int64_t>& shape, const FlatRanges& ranges,
                      const at::Tensor& dst) {
  H5Handle ftype(WMTP_H5_CHECK(H5Dget_type(d)));
  if (H5Tget_class(ftype) != H5T_FLOAT || H5Tget_size(ftype) != 4) return false;
  H5Handle space(WMTP_H5_CHECK(H5Dget_space(d)));
  const int64_t n = select_ranges(space, shape, ranges);
  WMTP_CHECK(n == dst.numel(), "read buffer size");
  H5Handle mspace = memory_space(n);
  WMTP_H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, mspace, space, dxpl, dst.data_ptr()));
  return true;
}

}  // namespace wmtp::tensor_io
