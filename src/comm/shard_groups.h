// Shard groups: the two communicators of hybrid sharding ([sharding] strategy = "hybrid_shard",
// docs/sharding.md). The N ranks form R = N/S groups of S consecutive ranks — a node's ranks, where
// the interconnect is fast — and each group holds one sharded copy of the model; the R ranks with
// the same place in their groups (one per group) hold the same shard and are its replicas:
//
//   world rank w:  group w / S (its index among the replicas), place w mod S (its rank in the group)
//   group comm:    ranks {kS, ..., kS + S-1}      all-gathers and gradient reduce-scatters
//   replica comm:  ranks {p, p + S, p + 2S, ...}  one all-reduce of the gradient shard per step
//
// plan_groups is pure (the dry run, tests with any host list); make_shard_groups splits the world
// communicator once, at start, under its watchdog and with its byte counting (split_comm).
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace wmtp {

struct GroupLayout {
  int world_size = 1;
  int group_size = 1;                                       // S
  int replicas() const { return world_size / group_size; }  // R
  int group_of(int rank) const { return rank / group_size; }
  int place_of(int rank) const { return rank % group_size; }
};

// S = `requested` (0: the ranks per node, which every node must have the same number of) for the
// world whose rank i runs on host rank_hosts[i]. Throws Error(Usage) naming [sharding]
// shard_group_size and the numbers when S does not divide the world size, or a group would span
// nodes unevenly: a group must lie inside one node, or be whole nodes with the same number of
// ranks each (so that its traffic never shares a node's network link with another group's).
GroupLayout plan_groups(int requested, const std::vector<std::string>& rank_hosts);

struct ShardGroups {
  GroupLayout layout;
  std::unique_ptr<Communicator> group;    // this rank's group: S ranks, rank = place
  std::unique_ptr<Communicator> replica;  // this rank's replicas: R ranks, rank = group index
};

// Builds a communicator over an MPI communicator (MPI, staged or NCCL: runtime.h); it may keep a
// duplicate, the MPI communicator it is given is freed afterwards.
using CommFactory = std::function<std::unique_ptr<Communicator>(MPI_Comm)>;
// Collective over `world` (of layout.world_size ranks).
ShardGroups make_shard_groups(MPI_Comm world, const GroupLayout& layout, const CommFactory& make);

}  // namespace wmtp
