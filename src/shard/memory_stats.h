// MemoryStats: per-rank bytes of model state (fp32 master shards, fp32 shard gradients, AdamW state,
// frozen shards), of no_sync gradient accumulators and of gathered parameter buffers (live and peak),
// and where the state lives under offload (device or pinned host memory).
// The engine reports measured figures; estimate_memory() predicts them for a planned world size
// without MPI (for --dry-run). docs/sharding.md defines each figure.
#pragma once
#include <cstdint>
#include <string>

#include "shard/sharding_config.h"

namespace wmtp {

class ShardPlan;

struct MemoryStats {
  int64_t master_bytes = 0;      // fp32 master copy of this rank's trainable elements (padding included)
  int64_t grad_bytes = 0;        // fp32 gradient of the same elements
  int64_t optimizer_bytes = 0;   // AdamW exp_avg + exp_avg_sq, fp32, same elements (0 without optimizer)
  int64_t frozen_bytes = 0;      // frozen elements in param_dtype
  int64_t local_grad_bytes = 0;  // no_sync: unsharded fp32 gradient accumulators (now / estimated peak)
  int64_t cast_bytes = 0;        // param_dtype copy of the trainable masters (bf16), made once per step
  int64_t gathered_bytes = 0;    // gathered parameter buffers alive now (estimate: 0)
  int64_t peak_gathered_bytes = 0;
  int gathered_units = 0;  // units with a gathered buffer alive now
  int peak_gathered_units = 0;
  int64_t gather_cache_bytes = 0;   // released gathered buffers kept for reuse (live + cached <= live peak + largest)
  Offload offload = Offload::None;  // where master / grad / optimizer / frozen / cast live
  int64_t staging_bytes = 0;        // offload "optimizer": pinned host slots of the optimizer step

  int64_t model_state_bytes() const { return master_bytes + grad_bytes + optimizer_bytes + frozen_bytes; }
  // Persistent bytes on the device: model state, no_sync accumulators and the param_dtype copy, less
  // what offload keeps on the host.
  int64_t device_state_bytes() const;
  // Persistent bytes in (pinned) host memory under offload: "optimizer" masters + AdamW state +
  // staging; "full" everything of model_state_bytes() and the param_dtype copy.
  int64_t host_state_bytes() const;
};

// Per-rank figures for `plan` (its world size) under `cfg`, with AdamW state when `with_optimizer`.
// peak_gathered_*: full_shard holds at most two units (the one computing and the one whose forward
// or backward comes next) plus prefetch_depth prefetched ones; shard_grad_op keeps every unit from its
// forward to its backward; no_shard gathers nothing (it computes on the replicas or on cast_bytes).
// cast_bytes: the param_dtype copy the gathers send (offload "optimizer": on the device even in fp32).
MemoryStats estimate_memory(const ShardPlan& plan, const ShardingConfig& cfg, bool with_optimizer = true);

std::string format_bytes(int64_t bytes);  // "1.50 GiB", "12.0 MiB", "512 B"

}  // namespace wmtp
