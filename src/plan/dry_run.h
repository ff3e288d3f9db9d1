// --dry-run: the resolved shard plan and the per-rank memory plan (plan/memory_plan.h) of a run at
// `world_size` ranks, every model of the pipeline included (trained and frozen), printed by rank 0.
// Reads only dataset metadata and checkpoint attributes; no collectives, no weights, no GPU.
#pragma once
#include "train/trainer.h"

namespace wmtp {

void print_dry_run(TrainerConfigs cfg, const Pipeline& pipeline, int world_size, const Logger& log);

}  // namespace wmtp
