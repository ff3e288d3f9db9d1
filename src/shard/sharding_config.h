// ShardingConfig: the [sharding] TOML table — strategy, mixed precision and communication options of
// the sharding engine. Defaults live here; docs/sharding.md explains each choice.
#pragma once
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "core/choice_names.h"
#include "core/error.h"

namespace wmtp {

// Hybrid: sharded (ZeRO-3, or ZeRO-2 with _grad_op) inside groups of shard_group_size ranks, and
// replicated across the groups (docs/sharding.md, "Hybrid sharding").
enum class ShardStrategy { FullShard, ShardGradOp, NoShard, HybridShard, HybridShardGradOp };
inline const std::vector<std::string> kShardStrategyNames = {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard",
                                                             "hybrid_shard_grad_op"};
inline bool is_hybrid(ShardStrategy s) {
  return s == ShardStrategy::HybridShard || s == ShardStrategy::HybridShardGradOp;
}
// The gathered parameters are kept from a unit's forward to its backward (ZeRO-2), not freed and
// gathered again.
inline bool keeps_gathered(ShardStrategy s) {
  return s == ShardStrategy::ShardGradOp || s == ShardStrategy::HybridShardGradOp;
}
// Where the per-element training state lives between uses (docs/sharding.md, "Offload"):
// None = on the device; Optimizer = fp32 master shards and AdamW moments on the host (pinned), the
// AdamW step on the CPU; Full = also the gradient shards and the param_dtype parameter shards.
enum class Offload { None, Optimizer, Full };
inline const std::vector<std::string> kOffloadNames = {"none", "optimizer", "full"};
// The spelling of a [sharding] dtype (bf16 or fp32), for the reports that name it.
inline const char* shard_dtype_name(c10::ScalarType t) { return t == c10::ScalarType::BFloat16 ? "bf16" : "fp32"; }

struct ShardingConfig {
  ShardStrategy strategy = ShardStrategy::FullShard;
  int shard_group_size = 0;                                 // hybrid: ranks per group (0 = the ranks per node)
  c10::ScalarType param_dtype = c10::ScalarType::BFloat16;  // gathered parameters and frozen shards (compute)
  c10::ScalarType reduce_dtype = c10::ScalarType::Float;    // gradients are reduced in
  bool prefetch = true;                                     // start the next units' gathers before they are needed
  int prefetch_depth = 1;                                   // units gathered ahead (with prefetch)
  bool async_reduce = true;                                 // reduce-scatter gradients without blocking the backward
  bool keep_immediate = true;  // keep a unit gathered when its backward comes right after its forward
  bool no_sync = false;        // accumulate full local gradients; reduce once per step
  Offload offload = Offload::None;

  template <class V>
  void visit(V& v) {
    v.choice("strategy", strategy, kShardStrategyNames,
             "full_shard = ZeRO-3, shard_grad_op = ZeRO-2 (params kept from forward to backward), no_shard = DDP; "
             "hybrid_shard = ZeRO-3 inside groups of shard_group_size ranks (a node's), replicated across groups "
             "(gathers and reduce-scatters stay inside the group, one all-reduce of the gradient shard per step "
             "crosses the network), hybrid_shard_grad_op = the same with ZeRO-2 inside the groups");
    v.field("shard_group_size", shard_group_size,
            "hybrid strategies: ranks per group, each group holding one sharded copy of the model; it must divide "
            "the world size, and a group must lie inside one node or be whole nodes (0 = the ranks per node)");
    v.choice("param_dtype", param_dtype, {{"bf16", c10::ScalarType::BFloat16}, {"fp32", c10::ScalarType::Float}},
             "dtype of gathered parameters (compute) and frozen shards");
    v.choice("reduce_dtype", reduce_dtype, {{"fp32", c10::ScalarType::Float}, {"bf16", c10::ScalarType::BFloat16}},
             "dtype gradients are reduced in");
    v.field("prefetch", prefetch, "gather the next units while the current one computes");
    v.field("prefetch_depth", prefetch_depth,
            "how many units may be gathered ahead of need (each costs one unit of gathered memory)");
    v.field("async_reduce", async_reduce,
            "post gradient reduce-scatters without waiting (accumulated in order; at most 2 in flight)");
    v.field("keep_immediate", keep_immediate,
            "learned: do not free a unit whose backward follows its forward with no other unit in between");
    v.field("no_sync", no_sync,
            "keep full local gradients across micro-batches and reduce once per step (more memory, less traffic)");
    v.choice("offload", offload, kOffloadNames,
             "none = all state on the device; optimizer = fp32 master shards + AdamW moments in pinned host memory, "
             "AdamW on the CPU (device keeps gradients and the param_dtype copy: 6 B/param instead of 18); full = "
             "also gradients and parameter shards on the host, uploaded per unit before its all-gather (device: "
             "gathered units and activations only)");
  }

  // Throws Error(Usage) naming the key for a negative shard_group_size, or one set for a strategy
  // without groups.
  void validate() const {
    if (shard_group_size < 0)
      throw_usage("[sharding] shard_group_size must be >= 0 (0 = the ranks per node), got ", shard_group_size);
    if (shard_group_size > 0 && !is_hybrid(strategy))
      throw_usage("[sharding] shard_group_size = ", shard_group_size, " applies to strategy = \"hybrid_shard\" or ",
                  "\"hybrid_shard_grad_op\" only; strategy is \"", choice_name(kShardStrategyNames, strategy),
                  "\" (remove shard_group_size, or choose a hybrid strategy)");
  }

  int effective_prefetch_depth() const {
    if (prefetch_depth < 0) throw_usage("[sharding] prefetch_depth must be >= 0, got ", prefetch_depth);
    return prefetch ? prefetch_depth : 0;
  }
};

}  // namespace wmtp
