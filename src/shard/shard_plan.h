// ShardPlan: how a model's parameters are laid out in flat buffers and split across N ranks
// (docs/sharding.md). Pure arithmetic over the ParamSpec list — no tensors, no MPI — so `--dry-run` can
// plan any world size without launching it, and the checkpoint layer can ask which elements of
// which parameter a rank owns.
//
// Layout: units in order of first appearance in the spec list; per unit two flat buffers (trainable
// and frozen), each the concatenation of its parameters in spec order, padded with zeros to a
// multiple of N, and cut into N equal slices. Under full_shard rank r holds and owns slice r. Under
// hybrid sharding (groups of G ranks, R = N/G replicas of each group's shard) the rank at place p of
// group k holds the group shard, slices [p*R, (p+1)*R) (padded / G elements), and owns slice p*R + k
// of it: its part of checkpoints, of the gradient norm and of the replicas' all-reduce. Padding to
// N rather than G makes a group shard split evenly among its replicas, and makes each rank's owned
// slice the one a full_shard rank owns: the checkpoint pieces are the same code for every layout.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/param_spec.h"

namespace wmtp {

// A parameter's place in its unit's flat buffer.
struct ParamSlot {
  std::string fqn;
  std::vector<int64_t> shape;
  int spec_index = 0;  // index in the spec list the plan was built from
  int64_t offset = 0;  // first element in the flat buffer
  int64_t numel = 0;
};

// One flat buffer (the trainable or the frozen parameters of one unit).
struct FlatLayout {
  std::vector<ParamSlot> params;
  int64_t numel = 0;              // sum of parameter sizes
  int64_t padded_numel = 0;       // numel rounded up to a multiple of the world size
  int64_t shard_numel = 0;        // padded_numel / world size: one slice, what each rank owns
  int64_t group_shard_numel = 0;  // padded_numel / group size: what a rank of a group holds
  int64_t padding() const { return padded_numel - numel; }
  bool empty() const { return numel == 0; }
};

struct UnitPlan {
  std::string name;
  FlatLayout trainable;
  FlatLayout frozen;
};

// The part of one parameter that one rank owns: elements [param_offset, param_offset + numel) of the
// row-major flattened parameter, found at [shard_offset, shard_offset + numel) of the rank's shard.
struct OwnedRange {
  std::string fqn;
  int unit = 0;  // index into ShardPlan::units()
  bool trainable = true;
  int64_t param_offset = 0;
  int64_t shard_offset = 0;
  int64_t numel = 0;
};

class ShardPlan {
 public:
  // Throws Error(Usage) for world_size < 1, a group size that does not divide it, a duplicate FQN,
  // an empty unit name or a non-positive dimension. group_size 0: the world size (no replicas).
  ShardPlan(const std::vector<ParamSpec>& specs, int world_size, int group_size = 0);

  int world_size() const { return world_size_; }
  int group_size() const { return group_size_; }
  int replicas() const { return world_size_ / group_size_; }
  const std::vector<UnitPlan>& units() const { return units_; }
  const UnitPlan& unit(int index) const { return units_.at(static_cast<size_t>(index)); }
  int unit_index(const std::string& name) const;  // -1 if absent
  const std::vector<ParamSpec>& specs() const { return specs_; }

  // Every parameter's owned piece on `rank`, in unit order (trainable buffer, then frozen), in
  // layout order within a buffer. Parameters that lie entirely in other ranks' slices are left out.
  // `rank` is the owned slice's index (under hybrid sharding place * replicas + group).
  std::vector<OwnedRange> owned_ranges(int rank) const;
  std::vector<OwnedRange> owned_ranges(int rank, bool trainable) const;
  // The same for the `count` consecutive slices from `first` (a group shard, or every slice: a whole
  // replica), each parameter once, shard_offset counted from the start of slice `first`.
  std::vector<OwnedRange> slice_ranges(int first, int count, bool trainable) const;

  // Totals over units (elements). Padded totals are what every rank's shards add up to times N.
  int64_t trainable_numel() const;
  int64_t frozen_numel() const;
  int64_t trainable_padded_numel() const;
  int64_t frozen_padded_numel() const;
  int64_t max_unit_gathered_numel() const;  // largest unit, trainable + frozen, padded

 private:
  int world_size_, group_size_;
  std::vector<ParamSpec> specs_;
  std::vector<UnitPlan> units_;
};

// Elements of [offset, offset+numel) of a flat buffer that fall into [lo, hi): {begin, end}, empty
// when begin >= end.
struct Interval {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end > begin ? end - begin : 0; }
};
Interval intersect(Interval a, Interval b);

}  // namespace wmtp
