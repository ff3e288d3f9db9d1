// The time of one training step, predicted before the job runs (`--dry-run`, docs/sharding.md "Time
// model"): the work of every micro-batch (plan/pass_flops.h) and the collectives the sharding engine
// posts for it (plan/collective_time.h), played through the engine's schedule on two timelines —
// the rank's compute and its communicator, which runs collectives one at a time in the order they
// were posted:
//   - a unit's gather is posted when it is needed, or earlier by prefetch: beginning a unit posts
//     the next units' gathers, up to prefetch_depth in flight (forward order, then the re-gathers of
//     the backward, newest first); the first unit of each micro-batch is never prefetched;
//   - a unit's gradient reduce-scatter is posted when its backward ends; with async_reduce the
//     backward goes on until a third is posted, which waits for the oldest (at most two in flight);
//     no_shard follows each with a blocking all-gather; no_sync reduces every unit once per step;
//   - hybrid sharding (groups of S ranks, R = N / S replicas) sums each unit's group-shard gradient
//     across the replicas once per step, after the last micro-batch, on the replicas' communicator:
//     one all-reduce over two replicas, else a reduce-scatter and an all-gather (whose replicas get
//     the same bits);
//   - then the clip's all-reduce and the optimizer (a memory-bound pass over the rank's elements).
// While the rank computes, a collective progresses at `overlap` of its speed (1 on NCCL; an MPI
// library without a progress thread less); while the rank waits, at full speed.
// Not modelled: data loading, the loss's element-wise work (see pass_flops.h), offload's copies, a
// pipeline's extra passes beyond its frozen models' forward (rho1's scoring forward of the policy),
// and the gathers the engine wastes under activation checkpointing at prefetch_depth >= 2 (a head
// block's recompute prefetches the next head's block, whose forward then gathers it again).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "plan/machine_profile.h"
#include "shard/sharding_config.h"
#include "train/pipeline.h"

namespace wmtp {

struct StepTimeInput {
  ModelSpec trained;
  std::vector<ModelSpec> frozen;  // forward only, once per micro-batch
  ShardingConfig sharding;
  int world_size = 1;
  int ranks_per_node = 1;
  // Ranks one unit's gathers and reduce-scatters span: the world, or a hybrid strategy's group of S
  // ranks (then world_size / shard_group replicas sum the gradient shards once per step).
  int shard_group = 0;  // 0 = world_size
  int64_t micro_batch = 1;
  int64_t accumulation = 1;
  int64_t seq = 1;
  bool pairwise = false;
  bool checkpointing = false;
  bool sequential = true;
  bool fused_attention = true;
  MachineProfile machine;
};

// The collectives of one kind over one step, per rank.
struct CollectiveTotal {
  std::string what;  // "all-gather (params)", "reduce-scatter (grads)", "all-reduce (replicas)", ...
  std::string link;  // link class (plan/collective_time.h)
  int group = 1;     // ranks in the group
  int64_t count = 0;
  int64_t bytes = 0;  // full buffers, summed
  double seconds = 0;
};

struct StepTimePlan {
  double flops = 0;  // one rank's FLOPs per step
  double matmul_flops_per_s = 0;
  double compute_s = 0;    // flops / rate
  double optimizer_s = 0;  // the optimizer's pass (and the param_dtype cast), memory-bound
  double comm_s = 0;       // every collective's time, as if alone on the link
  // Bytes a rank sends per step under the ring schedule, the busiest rank's inside a node and across
  // nodes: what the trainer's perf/comm_bytes_{intra,inter}_per_step count (comm/link_bytes.h).
  double bytes_intra = 0, bytes_inter = 0;
  double exposed_comm_s = 0;  // the step's time that is neither compute nor optimizer: waits
  double step_s = 0;
  double tokens_per_step = 0;  // the global batch's tokens (every rank)
  double tokens_per_s = 0;
  double tokens_per_s_per_rank = 0;
  std::vector<CollectiveTotal> collectives;
  std::vector<std::string> notes;
};

// Throws Error(Usage) when the profile lacks a rate the plan needs (the compute dtype's matmul
// rate, a link class a group spans) or the layout cannot be planned (a shard group that does not
// divide the world).
StepTimePlan plan_step_time(const StepTimeInput& in);

// The plan as the dry run prints it (several lines, each ending in '\n').
std::string describe_step_time(const StepTimePlan& p, const StepTimeInput& in);

}  // namespace wmtp
