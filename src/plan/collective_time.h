// The time of one collective from an alpha-beta model per link class (plan/machine_profile.h):
//
//   t = steps_intra x alpha_intra + steps_inter x alpha_inter + bytes x f / busbw
//
// with the ring's step counts and nccl-tests' bus-bandwidth factors: all-gather and reduce-scatter
// over n ranks take n-1 steps and move f = (n-1)/n of the full buffer over each link; an all-reduce
// 2(n-1) steps and f = 2(n-1)/n. A ring over several nodes crosses between nodes on nodes-1 of its
// steps (2(nodes-1) for an all-reduce) and stays on a node for the rest, as NCCL's own tuning model
// counts them (src/graph/tuning.cc). The bandwidth is the slowest link class the group uses:
// intra for a group on one node, inter for one rank per node, span (when measured) for a group of
// every rank of its nodes, else min(intra, k x inter) for k ranks per node.
#pragma once
#include <cstdint>
#include <string>

#include "plan/machine_profile.h"

namespace wmtp {

enum class Collective { AllGather, ReduceScatter, AllReduce };
const char* collective_name(Collective c);  // "all-gather", "reduce-scatter", "all-reduce"

// The ranks of one group and how they sit on nodes.
struct GroupSpan {
  int ranks = 1;
  int nodes = 1;  // distinct nodes among them (ranks / nodes per node, evenly)
  int per_node() const { return nodes > 0 ? ranks / nodes : ranks; }
};

// A group of `size` ranks made of every `stride`-th rank from rank 0 (stride 1: contiguous ranks),
// on nodes of `ranks_per_node` consecutive ranks.
GroupSpan group_span(int size, int stride, int ranks_per_node);

// nccl-tests' bus-bandwidth factor for n ranks: (n-1)/n, or 2(n-1)/n for an all-reduce.
double busbw_factor(Collective c, int n);

struct CollectiveCost {
  double seconds = 0;
  std::string link;  // "intra", "inter", "span", "intra+inter" (the ring rule), "" for one rank
};

// `bytes`: the full buffer (all-gather's output, reduce-scatter's input, all-reduce's buffer).
// Throws Error(Usage) naming the profile and the class it lacks when the group needs one it has
// not measured.
CollectiveCost collective_cost(Collective c, int64_t bytes, const GroupSpan& g, const MachineProfile& m);

}  // namespace wmtp
