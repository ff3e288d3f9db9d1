// Checksum responsibilities for verification on read (see checksum_plan.h).
#include "ckpt/checksum_plan.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "comm/mpi_util.h"

namespace wmtp {

FlatRanges union_ranges(FlatRanges a, const FlatRanges& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  FlatRanges out;
  for (const auto& r : a) {
    if (r.second <= r.first) continue;
    if (!out.empty() && r.first <= out.back().second) out.back().second = std::max(out.back().second, r.second);
    else
      out.push_back(r);
  }
  return out;
}

FlatRanges subtract_ranges(const FlatRanges& a, const FlatRanges& b) {
  FlatRanges out;
  size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) ++j;
    for (size_t k = j; k < b.size() && b[k].first < hi && lo < hi; ++k) {
      if (b[k].first > lo) out.emplace_back(lo, b[k].first);
      lo = std::max(lo, b[k].second);
    }
    if (lo < hi) out.emplace_back(lo, hi);
  }
  return out;
}

FlatRanges slice_ranges(const FlatRanges& ranges, int64_t first, int64_t last) {
  FlatRanges out;
  int64_t pos = 0;
  for (auto [b, e] : ranges) {
    const int64_t lo = std::max(first, pos), hi = std::min(last, pos + (e - b));
    if (lo < hi) out.emplace_back(b + (lo - pos), b + (hi - pos));
    pos += e - b;
  }
  return out;
}

namespace {

// [count, b0, e0, b1, e1, ...] per tensor, as bytes.
std::string encode(const std::vector<FlatRanges>& mine) {
  std::vector<int64_t> v;
  for (const auto& rs : mine) {
    v.push_back(int64_t(rs.size()));
    for (auto [b, e] : rs) v.push_back(b), v.push_back(e);
  }
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
}

std::vector<FlatRanges> decode(const std::string& bytes, size_t n_tensors) {
  std::vector<int64_t> v(bytes.size() / sizeof(int64_t));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(int64_t));
  std::vector<FlatRanges> out(n_tensors);
  size_t pos = 0;
  for (auto& rs : out) {
    WMTP_CHECK(pos < v.size(), "range list of another rank is short");
    const int64_t n = v[pos++];
    for (int64_t k = 0; k < n; ++k, pos += 2) rs.emplace_back(v[pos], v[pos + 1]);
  }
  return out;
}

}  // namespace

ChecksumPlan plan_checksums(MPI_Comm comm, const std::vector<int64_t>& numel, const std::vector<FlatRanges>& mine) {
  const int rank = comm_rank(comm), world = comm_size(comm);
  const size_t n = numel.size();
  std::vector<std::vector<FlatRanges>> all;
  for (const std::string& bytes : all_gather_bytes(comm, encode(mine))) all.push_back(decode(bytes, n));
  ChecksumPlan plan;
  plan.own.resize(n), plan.extra.resize(n), plan.any_extra.resize(n);
  for (size_t i = 0; i < n; ++i) {
    FlatRanges below, covered;
    for (int r = 0; r < world; ++r) {
      const FlatRanges rs = union_ranges({}, all[size_t(r)][i]);
      if (r == rank) plan.own[i] = subtract_ranges(rs, below);
      if (r < rank) below = union_ranges(below, rs);
      covered = union_ranges(covered, rs);
    }
    const FlatRanges gaps = subtract_ranges({{0, numel[i]}}, covered);
    int64_t total = 0;
    for (auto [b, e] : gaps) total += e - b;
    plan.any_extra[i] = total > 0;
    plan.extra[i] = slice_ranges(gaps, total * rank / world, total * (rank + 1) / world);
  }
  return plan;
}

}  // namespace wmtp
