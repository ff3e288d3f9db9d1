// ShardingConfig: the [sharding] TOML table — strategy, mixed precision and communication options of
// the sharding engine. Defaults live here; docs/sharding.md explains each choice.
#pragma once
#include <c10/core/ScalarType.h>

#include <string>

#include "core/error.h"

namespace wmtp {

enum class ShardStrategy { FullShard, ShardGradOp, NoShard };
// Where the per-element training state lives between uses (docs/sharding.md, "Offload"):
// None = on the device; Optimizer = fp32 master shards and AdamW moments on the host (pinned), the
// AdamW step on the CPU; Full = also the gradient shards and the param_dtype parameter shards.
enum class Offload { None, Optimizer, Full };

struct ShardingConfig {
  std::string strategy = "full_shard";  // full_shard | shard_grad_op | no_shard
  std::string param_dtype = "bf16";     // dtype of gathered parameters and frozen shards (compute dtype)
  std::string reduce_dtype = "fp32";    // dtype gradients are reduced in
  bool prefetch = true;                 // start the next units' gathers before they are needed
  int prefetch_depth = 1;               // units gathered ahead (with prefetch)
  bool async_reduce = true;             // reduce-scatter gradients without blocking the backward
  bool keep_immediate = true;           // keep a unit gathered when its backward comes right after its forward
  bool no_sync = false;                 // accumulate full local gradients; reduce once per step
  std::string offload = "none";         // none | optimizer | full

  template <class V>
  void visit(V& v) {
    v.choice("strategy", strategy, {"full_shard", "shard_grad_op", "no_shard"},
             "full_shard = ZeRO-3, shard_grad_op = ZeRO-2 (params kept from forward to backward), no_shard = DDP");
    v.choice("param_dtype", param_dtype, {"bf16", "fp32"}, "dtype of gathered parameters (compute) and frozen shards");
    v.choice("reduce_dtype", reduce_dtype, {"fp32", "bf16"}, "dtype gradients are reduced in");
    v.field("prefetch", prefetch, "gather the next units while the current one computes");
    v.field("prefetch_depth", prefetch_depth,
            "how many units may be gathered ahead of need (each costs one unit of gathered memory)");
    v.field("async_reduce", async_reduce,
            "post gradient reduce-scatters without waiting (accumulated in order; at most 2 in flight)");
    v.field("keep_immediate", keep_immediate,
            "learned: do not free a unit whose backward follows its forward with no other unit in between");
    v.field("no_sync", no_sync,
            "keep full local gradients across micro-batches and reduce once per step (more memory, less traffic)");
    v.choice("offload", offload, {"none", "optimizer", "full"},
             "none = all state on the device; optimizer = fp32 master shards + AdamW moments in pinned host memory, "
             "AdamW on the CPU (device keeps gradients and the param_dtype copy: 6 B/param instead of 18); full = "
             "also gradients and parameter shards on the host, uploaded per unit before its all-gather (device: "
             "gathered units and activations only)");
  }

  ShardStrategy strategy_enum() const {
    if (strategy == "full_shard") return ShardStrategy::FullShard;
    if (strategy == "shard_grad_op") return ShardStrategy::ShardGradOp;
    if (strategy == "no_shard") return ShardStrategy::NoShard;
    throw_usage("[sharding] strategy: unknown value '", strategy, "' (full_shard, shard_grad_op, no_shard)");
  }
  static c10::ScalarType dtype_of(const std::string& key, const std::string& name) {
    if (name == "bf16") return c10::ScalarType::BFloat16;
    if (name == "fp32") return c10::ScalarType::Float;
    throw_usage("[sharding] ", key, ": unknown dtype '", name, "' (bf16, fp32)");
  }
  c10::ScalarType param_scalar_type() const { return dtype_of("param_dtype", param_dtype); }
  int effective_prefetch_depth() const {
    if (prefetch_depth < 0) throw_usage("[sharding] prefetch_depth must be >= 0, got ", prefetch_depth);
    return prefetch ? prefetch_depth : 0;
  }
  c10::ScalarType reduce_scalar_type() const { return dtype_of("reduce_dtype", reduce_dtype); }
  Offload offload_enum() const {
    if (offload == "none") return Offload::None;
    if (offload == "optimizer") return Offload::Optimizer;
    if (offload == "full") return Offload::Full;
    throw_usage("[sharding] offload: unknown value '", offload, "' (none, optimizer, full)");
  }
};

}  // namespace wmtp
