// The bridge between the sharding engine and checkpoint files (docs/checkpoint-format.md): the
// trained model and its optimizer as checkpointed parts like the rest of the run
// (train/checkpointed.h), a training checkpoint written from the run's parts, a resume that reads one
// back into them, and the model loads of train/run_models.h. Each rank reads and writes only the
// elements it holds, so a checkpoint moves between world sizes. Every function is collective over
// the communicator it is given.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_dir.h"
#include "train/checkpointed.h"

namespace wmtp {

class MtpModel;
class ShardedModel;
class ShardedAdamW;
struct ModelHandle;

// Why a model's tensors are loaded, which says what the file must hold (load_model_tensors).
enum class LoadPurpose {
  InitialWeights,   // the trained model's initial weights from a whole file: tensors the file lacks
                    // keep their seeded init, but only LoRA adapters and the value head may be missing
  InitialAdapters,  // the trained model's initial adapters from an adapters-only ("lora") file, over
                    // the base it records: every trained tensor must be there
  FrozenWeights,    // a frozen model: every tensor from a whole file; from an adapters-only file,
                    // over the base it records, every tensor its spec trains (adapters, value head)
  Resume,           // a training checkpoint: every trained tensor must be there; frozen ones may be
                    // missing only from an adapters-only checkpoint
};

// The trained model: its tensors in /model (every parameter, or only the trained ones when
// `adapters_only`), its LoRA run in /lora (`lora`: LoRA runs only) and its value head in
// /value_head. On resume its check refuses a file whose /lora records another base than this run's
// (`lora->base_fingerprint`: adapters trained on one base cannot go on on another), or that lacks a
// tensor the run needs or holds it in another shape.
class TrainedModelState final : public Checkpointed {
 public:
  TrainedModelState(ModelHandle& model, const LoraRecord* lora, bool adapters_only)
      : m_(model), lora_(lora), adapters_only_(adapters_only) {}
  CheckpointHeader header(int64_t step) const;  // kind lora when adapters_only, else full
  void save_state(TrainState&) const override {}
  void write_tensors(CheckpointWriter& w) const override;
  std::vector<std::string> check_state(const TrainState&, const CheckpointReader& file) const override;
  void load_state(const TrainState&, const CheckpointReader& file) override;

 private:
  ModelHandle& m_;
  const LoraRecord* lora_;
  bool adapters_only_;
};

// AdamW's moments (/optim/exp_avg, /optim/exp_avg_sq) and step count (/optim step), written when
// `save`. A checkpoint without them resumes with fresh ones (zero moments, step 0).
class OptimizerState final : public Checkpointed {
 public:
  OptimizerState(ShardedAdamW& opt, const MtpModel& model, bool save) : opt_(opt), model_(model), save_(save) {}
  void save_state(TrainState&) const override {}
  void write_tensors(CheckpointWriter& w) const override;
  std::vector<std::string> check_state(const TrainState&, const CheckpointReader& file) const override;
  void load_state(const TrainState&, const CheckpointReader& file) override;

 private:
  ShardedAdamW& opt_;
  const MtpModel& model_;
  bool save_;
};

// Writes step_N.h5.tmp collectively (`header`, every part's tensor groups and /train keys, the
// resolved config), then commits it atomically (rename, `latest`, retention). Returns the final path.
std::string save_training_checkpoint(CheckpointDir& dir, int64_t keep_last, MPI_Comm comm,
                                     const CheckpointHeader& header, const std::vector<const Checkpointed*>& parts,
                                     const std::string& config_toml = "");

// What resume_training did: the file resumed from ("" = none) and the parts' notes for the log.
struct Resumed {
  std::string path;
  std::vector<std::string> notes;
};

// Resumes `parts` from the checkpoint [checkpoint] resume names (ckpt/checkpoint_dir.h,
// resume_checkpoint): the file is opened and its /train read and verified once; every part's
// check_state runs on it before any tensor is read (a refusal ends the resume there, with nothing
// loaded); then every part's load_state reads what it holds, each tensor verified as it is read.
// Under resume = "auto" a file that turns out damaged is set aside and the previous one tried.
Resumed resume_training(const CheckpointConfig& cfg, MPI_Comm comm, const std::vector<Checkpointed*>& parts);

// A model's tensors from a model file or a training checkpoint (train/run_models.h: initial
// weights, frozen models): the tensors `file` lacks must be allowed by `purpose` (Error(Input)
// naming the first that is not); each rank reads only what it holds.
void load_model_tensors(const CheckpointReader& file, const MtpModel& model, ShardedModel& engine, LoadPurpose purpose);

}  // namespace wmtp
