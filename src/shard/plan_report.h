// The shard plan as a table for --dry-run and start-up logs: per unit its parameters, element
// counts, padding and per-rank bytes (fp32 master, fp32 gradient, AdamW state, frozen shard, and the
// gathered buffer), then the per-rank totals and the memory estimate. Needs no MPI: plan any N.
#pragma once
#include <string>

namespace wmtp {

class ShardPlan;
struct ShardingConfig;

std::string describe_plan(const ShardPlan& plan, const ShardingConfig& cfg, bool with_optimizer = true);

}  // namespace wmtp
