// The run's configuration: every section a train-* program reads (each component still receives
// only its own struct), and the two ways a pipeline meets it (train/pipeline.h): the read-only
// PipelineSettings it is handed, and what it declares (batch kind, parameter groups), which
// configure_run() writes into the sections that own them.
#pragma once
#include "ckpt/checkpoint_dir.h"
#include "comm/runtime.h"
#include "data/data_config.h"
#include "model/lora.h"
#include "model/model_args.h"
#include "shard/optimizer_config.h"
#include "shard/sharding_config.h"
#include "train/pipeline.h"
#include "train/train_config.h"

namespace wmtp {

class ConfigSet;

struct TrainerConfigs {
  ModelConfig model;
  DataConfig data;
  TrainingConfig training;
  OptimizerConfig optimizer;
  LrScheduleConfig lr_schedule;
  ShardingConfig sharding;
  LoraConfig lora;
  CheckpointConfig checkpoint;
  LoggingConfig logging;
  RuntimeConfig runtime;
};
void register_trainer_sections(ConfigSet& set, TrainerConfigs& cfg);

// Every section's limits, once, before any work (the dry run's too): Error(Usage) naming the key.
void validate_trainer_configs(const TrainerConfigs& cfg);

// What a pipeline may read of `cfg` beyond its own section (a copy).
PipelineSettings pipeline_settings(const TrainerConfigs& cfg);

// Completes a loaded config for `pipeline`: [data] pairwise from its batch kind, its check() on the
// settings, then the parameter groups it declares written into [optimizer] (Error(Usage) if the
// config sets other groups of its own; the same groups, a resolved config read back, are fine).
// Call once before constructing a Trainer; print_dry_run calls it on its own copy.
void configure_run(TrainerConfigs& cfg, const Pipeline& pipeline);

}  // namespace wmtp
