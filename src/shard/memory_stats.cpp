// Memory figures: the planned per-rank estimate and human-readable formatting.
#include "shard/memory_stats.h"

#include <algorithm>
#include <cstdio>

#include "shard/shard_plan.h"

namespace wmtp {

MemoryStats estimate_memory(const ShardPlan& plan, const ShardingConfig& cfg, bool with_optimizer) {
  const ShardStrategy strategy = cfg.strategy;
  const int64_t es = int64_t(c10::elementSize(cfg.param_dtype));
  const bool replicated = strategy == ShardStrategy::NoShard;
  int64_t local_t = 0, local_f = 0, all_padded = 0, trainable_padded = 0, largest_t = 0;
  for (const UnitPlan& u : plan.units()) {
    // A rank holds its shard, its group's shard (hybrid), or the whole replica (no_shard).
    const int64_t t = replicated ? u.trainable.padded_numel : u.trainable.group_shard_numel;
    local_t += t;
    largest_t = std::max(largest_t, t);
    local_f += replicated ? u.frozen.padded_numel : u.frozen.group_shard_numel;
    all_padded += u.trainable.padded_numel + u.frozen.padded_numel;
    trainable_padded += u.trainable.padded_numel;
  }
  MemoryStats m;
  m.offload = cfg.offload;
  m.master_bytes = 4 * local_t;
  m.grad_bytes = 4 * local_t;
  m.optimizer_bytes = with_optimizer ? 8 * local_t : 0;
  m.frozen_bytes = es * local_f;
  if (cfg.no_sync) m.local_grad_bytes = 4 * trainable_padded;
  // The copy the gathers send: none in fp32 where the master itself is sent (on the device, or
  // uploaded per gather from the host under "full"); under "optimizer" always, on the device.
  if (es != 4 || m.offload == Offload::Optimizer) m.cast_bytes = es * local_t;
  // Two slots, each for the largest shard's fp32 gradient and its param_dtype copy.
  if (m.offload == Offload::Optimizer && with_optimizer) m.staging_bytes = 2 * (4 + es) * largest_t;
  // Groups of one (hybrid) compute on their own buffers, as no_shard does.
  switch (is_hybrid(strategy) && plan.group_size() == 1 ? ShardStrategy::NoShard : strategy) {
    case ShardStrategy::FullShard:
    case ShardStrategy::HybridShard: {
      int units = std::min<int>(static_cast<int>(plan.units().size()), 2 + cfg.effective_prefetch_depth());
      m.peak_gathered_bytes = units * es * plan.max_unit_gathered_numel();
      m.peak_gathered_units = units;
      break;
    }
    case ShardStrategy::ShardGradOp:
    case ShardStrategy::HybridShardGradOp:
      m.peak_gathered_bytes = es * all_padded;
      m.peak_gathered_units = static_cast<int>(plan.units().size());
      break;
    case ShardStrategy::NoShard: break;
  }
  return m;
}

int64_t MemoryStats::device_state_bytes() const {
  switch (offload) {
    case Offload::None: return model_state_bytes() + local_grad_bytes + cast_bytes;
    case Offload::Optimizer: return grad_bytes + frozen_bytes + local_grad_bytes + cast_bytes;
    case Offload::Full: return local_grad_bytes;
  }
  return 0;
}

int64_t MemoryStats::host_state_bytes() const {
  switch (offload) {
    case Offload::None: return 0;
    case Offload::Optimizer: return master_bytes + optimizer_bytes + staging_bytes;
    case Offload::Full: return model_state_bytes() + cast_bytes;
  }
  return 0;
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  double b = static_cast<double>(bytes);
  if (bytes >= (int64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(int64_t(1) << 30));
  else if (bytes >= (int64_t(1) << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(int64_t(1) << 20));
  else if (bytes >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

}  // namespace wmtp
