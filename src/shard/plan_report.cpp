// describe_plan: fixed-width table of the shard plan and the per-rank memory estimate.
#include "shard/plan_report.h"

#include <cstdarg>
#include <cstdio>

#include "core/choice_names.h"
#include "shard/memory_stats.h"
#include "shard/shard_plan.h"
#include "shard/sharding_config.h"

namespace wmtp {

namespace {
std::string row(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string row(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return std::string(buf) + "\n";
}
}  // namespace

std::string describe_plan(const ShardPlan& plan, const ShardingConfig& cfg, bool with_optimizer) {
  const bool replicated = cfg.strategy == ShardStrategy::NoShard;
  const int64_t es = int64_t(c10::elementSize(cfg.param_dtype));
  const std::string prefetch = cfg.effective_prefetch_depth() > 0
                                   ? ", prefetch depth " + std::to_string(cfg.effective_prefetch_depth())
                                   : "";
  const std::string groups = is_hybrid(cfg.strategy) ? " (groups of " + std::to_string(plan.group_size()) + " x " +
                                                           std::to_string(plan.replicas()) + " replicas)"
                                                     : "";
  std::string out = row("shard plan: %zu units, world size %d, strategy %s%s, param_dtype %s, reduce_dtype %s%s%s%s",
                        plan.units().size(), plan.world_size(), choice_name(kShardStrategyNames, cfg.strategy).c_str(),
                        groups.c_str(), shard_dtype_name(cfg.param_dtype), shard_dtype_name(cfg.reduce_dtype),
                        prefetch.c_str(), cfg.async_reduce ? ", async reduce" : "", cfg.no_sync ? ", no_sync" : "");
  out += row("%-20s %7s %13s %13s %9s %11s %11s %11s %11s %11s", "unit", "tensors", "trainable", "frozen", "padding",
             "master/rk", "grad/rk", "adam/rk", "frozen/rk", "gathered");
  int64_t tot_t = 0, tot_f = 0, tot_pad = 0;
  for (const UnitPlan& u : plan.units()) {
    int64_t local_t = replicated ? u.trainable.padded_numel : u.trainable.group_shard_numel;
    int64_t local_f = replicated ? u.frozen.padded_numel : u.frozen.group_shard_numel;
    int64_t pad = u.trainable.padding() + u.frozen.padding();
    out += row("%-20s %7zu %13lld %13lld %9lld %11s %11s %11s %11s %11s", u.name.c_str(),
               u.trainable.params.size() + u.frozen.params.size(), static_cast<long long>(u.trainable.numel),
               static_cast<long long>(u.frozen.numel), static_cast<long long>(pad), format_bytes(4 * local_t).c_str(),
               format_bytes(4 * local_t).c_str(), format_bytes(with_optimizer ? 8 * local_t : 0).c_str(),
               format_bytes(es * local_f).c_str(),
               format_bytes(es * (u.trainable.padded_numel + u.frozen.padded_numel)).c_str());
    tot_t += u.trainable.numel;
    tot_f += u.frozen.numel;
    tot_pad += pad;
  }
  MemoryStats m = estimate_memory(plan, cfg, with_optimizer);
  out += row("%-20s %7zu %13lld %13lld %9lld %11s %11s %11s %11s", "total", plan.specs().size(),
             static_cast<long long>(tot_t), static_cast<long long>(tot_f), static_cast<long long>(tot_pad),
             format_bytes(m.master_bytes).c_str(), format_bytes(m.grad_bytes).c_str(),
             format_bytes(m.optimizer_bytes).c_str(), format_bytes(m.frozen_bytes).c_str());
  const std::string formula = "16 B x trainable + " + std::to_string(es) + " B x frozen elements, padding included";
  out += "per rank (estimate): model state " + format_bytes(m.model_state_bytes()) + " = " +
         (replicated ? formula + " (replicated)" : "(" + formula + ") / " + std::to_string(plan.group_size())) +
         "; gathered parameters at most " + format_bytes(m.peak_gathered_bytes) + " (" +
         std::to_string(m.peak_gathered_units) + " units)";
  if (m.local_grad_bytes > 0) out += "; no_sync gradients " + format_bytes(m.local_grad_bytes);
  out += "\n";
  return out;
}

}  // namespace wmtp
