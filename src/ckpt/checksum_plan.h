// Who checksums which elements when many ranks read a group of tensors (verification on read).
//
// A stored checksum covers a whole tensor, and sums of per-element terms add up across ranks
// (checksum.h). So ranks can verify what they read with one all-reduce — provided every element is
// counted exactly once. Ranks may read overlapping ranges (no_shard replicas) or leave elements
// unread (a rank that only wants part of a tensor). The plan, computed identically on every rank from
// everyone's ranges, gives each rank:
//   own   — the parts of its own reads it checksums: its ranges minus those of lower ranks;
//   extra — elements nobody read, split evenly across ranks, which it reads only to checksum them.
// The engine layout (every element owned by one rank) has no overlap and no gap: no extra reads.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace wmtp {

using FlatRanges = std::vector<std::pair<int64_t, int64_t>>;  // sorted, disjoint [begin, end)

struct ChecksumPlan {
  std::vector<FlatRanges> own;    // per tensor
  std::vector<FlatRanges> extra;  // per tensor
  std::vector<bool> any_extra;    // per tensor: some rank reads extra elements (the same on all ranks)
};

// Collective over `comm` (MPI_COMM_NULL: one process). `numel[i]` is tensor i's element count,
// `mine[i]` this rank's ranges of it.
ChecksumPlan plan_checksums(MPI_Comm comm, const std::vector<int64_t>& numel, const std::vector<FlatRanges>& mine);

// Interval arithmetic on sorted disjoint ranges (exposed for tests).
FlatRanges union_ranges(FlatRanges a, const FlatRanges& b);
FlatRanges subtract_ranges(const FlatRanges& a, const FlatRanges& b);
// The elements [first, last) of the concatenation of `ranges`, as ranges.
FlatRanges slice_ranges(const FlatRanges& ranges, int64_t first, int64_t last);

}  // namespace wmtp
