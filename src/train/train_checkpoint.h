// The bridge between the sharding engine and checkpoint files: what a training checkpoint holds
// (docs/checkpoint-format.md) and how a run's model, optimizer and progress are saved and restored
// at any world size. Every function is collective over the engine's communicator.
#pragma once
#include <mpi.h>

#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/train_state.h"

namespace wmtp {

class MtpModel;
class ShardedModel;
class ShardedAdamW;

struct SaveRequest {
  int64_t step = 0;
  bool adapters_only = false;     // LoRA runs with [checkpoint] lora_only: trainable tensors only
  bool with_optimizer = true;
  std::string config_toml;
  const TrainState* state = nullptr;
  const LoraInfo* lora = nullptr;  // LoRA runs
};

// Writes step_N.h5.tmp collectively, then commits it atomically (rename, `latest`, retention).
// Returns the final path.
std::string save_training_checkpoint(CheckpointDir& dir, int64_t keep_last, MPI_Comm comm, const MtpModel& model,
                                     ShardedModel& engine, ShardedAdamW* opt, const SaveRequest& req);

enum class LoadPurpose {
  InitialWeights,  // a model-only file: tensors the file lacks keep their seeded init, but only
                   // LoRA adapters and the value head may be missing
  Resume,          // a training checkpoint: every trained tensor must be there; frozen ones may be
                   // missing only from an adapters-only ("lora") checkpoint
};

// Loads model tensors (each rank reads only what it holds) and, for Resume with an optimizer, the
// AdamW moments and step count. Returns the file's /train state (empty for model-only files).
// `lora` (a LoRA run's resume): the run's base, whose fingerprint the file's /lora must record —
// adapters trained on one base and resumed on another are refused (Error(Input) naming both).
TrainState load_training_checkpoint(const std::string& path, MPI_Comm comm, const MtpModel& model,
                                    ShardedModel& engine, ShardedAdamW* opt, LoadPurpose purpose,
                                    const LoraInfo* lora = nullptr);

}  // namespace wmtp
