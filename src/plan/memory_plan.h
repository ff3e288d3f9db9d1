// MemoryPlan: what one rank of a planned run needs on its device and what a node needs in host
// memory — the engine's state (shards, gradients, AdamW, the param_dtype copy; on the host what
// offload moves there), gathered units, activations at the step's peak phase by tensor kind
// (plan/activation_memory.h), allocator overhead and runtime — against a budget (a GPU's capacity,
// the node's RAM), and, when it does not fit, the levers that would make it fit with their figures.
// Pure arithmetic for --dry-run: no GPU, no MPI, no weights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/param_spec.h"
#include "shard/memory_stats.h"
#include "shard/sharding_config.h"
#include "plan/activation_memory.h"
#include "train/pipeline.h"

namespace wmtp {

struct MemoryPlanInput {
  ModelSpec trained;
  std::vector<ModelSpec> frozen;
  ShardingConfig sharding;
  int world_size = 1;
  int ranks_per_node = 1;
  int64_t micro_batch = 1;  // sequences (or pairs) per micro-batch
  bool pairwise = false;    // a micro-batch forwards 2 x micro sequences
  int64_t seq = 1;          // [data] max_length
  bool checkpointing = false;
  bool sequential = true;
  int64_t loss_chunk = 0;
  bool cuda = false;            // plans a GPU run (bf16 fused attention, the caching allocator)
  bool fused_attention = true;  // CPU: whether this LibTorch has fused attention
  int64_t device_budget = 0;    // bytes the caching allocator may reserve (0: unknown)
  std::string device_name;      // what the budget is ("NVIDIA H100 80GB HBM3", "[runtime] gpu_memory_gib")
  int64_t host_budget = 0;      // bytes a node's ranks may use (0: unknown)
};

struct MemoryPlan {
  MemoryPlanInput in;
  MemoryStats state;               // the trained model's engine state per rank
  int64_t gathered = 0;            // gathered parameters in the peak phase (part of `peak`)
  int64_t uploads = 0;             // offload "full": shards uploaded for the gathers in flight
  std::vector<MemoryItem> frozen;  // frozen models' shards per rank
  ActivationPeak peak;             // gathered units, activations, loss buffers, transients at the peak phase
  int64_t activations_other = 0;   // the same with activation checkpointing toggled
  int64_t allocator_overhead = 0;  // GPU: a cached block of the largest transient; CPU: the malloc heap kept
  int64_t runtime = 0;             // CPU: LibTorch, MPI, dataset (RSS); GPU: 0 inside the allocator
  int64_t host_runtime = 0;        // GPU: host RSS per rank without offloaded state
  int64_t host_transient = 0;      // offload: the host AdamW's temporaries (+ "full": a downloaded gradient)
  int64_t device_total = 0;        // per rank: GPU the allocator's reserved peak, CPU the peak RSS
  int64_t host_per_rank = 0, host_per_node = 0;

  bool device_fits() const { return in.device_budget <= 0 || device_total <= in.device_budget; }
  bool host_fits() const { return in.host_budget <= 0 || host_per_node <= in.host_budget; }
  bool fits() const { return device_fits() && host_fits(); }
};

MemoryPlan plan_memory(const MemoryPlanInput& in);

// A hybrid strategy's group size for a planned run (0 for the others): [sharding] shard_group_size,
// or the ranks per node, checked against nodes of ranks_per_node ranks (comm/shard_groups.h).
int planned_group_size(const ShardingConfig& sc, int world_size, int ranks_per_node);

// The parameters a planned model has (all frozen for a frozen model), built from its architecture alone.
std::vector<ParamSpec> planned_param_specs(const ModelSpec& spec);

// A change that would make a plan fit ("activation checkpointing", "16 ranks", ...), with its plan.
struct MemoryLever {
  std::string what;
  MemoryPlan plan;
};
// Every lever tried on its own (more ranks: the fewest that fit, doubling up to 4096; smaller
// micro-batch: halving; activation checkpointing; offload "optimizer", "full"); when none fits alone,
// the best combination of checkpointing, offload and micro-batch 1 with the fewest ranks that fit.
std::vector<MemoryLever> memory_levers(const MemoryPlanInput& in);

// The capacity CUDA reports for a GPU named like `name` ("H100", "NVIDIA H200", "A100-40GB"), in
// bytes; 0 when the name is not in the table.
int64_t gpu_capacity_bytes(const std::string& name);

// Memory outside the caching allocator on each GPU (CUDA context, kernels, NCCL, cuBLAS handles).
constexpr int64_t kCudaContextBytes = int64_t(1) << 30;
// Of a node's RAM the job may use; the rest is the OS's, the page cache's (dataset, checkpoints), MPI's.
constexpr double kHostUsableFraction = 0.9;

}  // namespace wmtp
