// Pipeline: what a train-* program plugs into the one Trainer (docs/training.md, and
// docs/adding-a-pipeline.md for writing one). The trainer owns the loop, the data, the optimizer, the
// schedule, checkpoints, resume, signals and logging. A pipeline reads its own TOML section and the
// read-only PipelineSettings (the [model]/[lora] it trains, [training] init_weights, [data] train,
// [lr_schedule]); it writes into no other section, but declares what it adds:
//
//   batch kind     pointwise (the correct sample of each pair) or pairwise (correct, incorrect)
//   param groups   optimizer parameter groups it sets itself (the trainer writes them into [optimizer])
//   models         the one model it trains and the frozen models it reads; the trainer builds each
//                  through the sharding engine (frozen ones as frozen units: param_dtype, no gradient,
//                  no optimizer state), loads their weights and hands them over in attach()
//   statistics     its step statistics by name (train/named_stats.h), reduced by the trainer
//   metrics        the train/* and val/* keys it fills in finish_step / finish_eval
//   state          what must survive a resume (e.g. the TD EMA), saved in /train of every checkpoint
//
// The trainer calls the hooks in this order and no other:
//
//   start-up     add_config -> (config loaded) -> batch_kind, check, param_groups (also --dry-run)
//                -> trained_model, frozen_models -> (models built, weights loaded) -> attach
//                -> check_state, load_state (on resume)
//   each step    begin_step (all micro-batches, before any backward: rho1's global selection,
//                verifiable's weights) returns the step's plan -> the plan's counts reduced by
//                train_step (train_step.h: one rule for every pipeline) -> forward_backward per
//                micro-batch (accumulation of them) with its part of the plan and its counts ->
//                (clip, optimizer step) -> finish_step with the statistics summed over every
//                micro-batch of every rank (one reduction) -> the step loss + metrics
//   validation   eval_batch per micro-batch (also for filler batches that keep collectives in step)
//                -> finish_eval on the reduced statistics
//   checkpoint   save_state (after finish_step of the step it follows)
//
// The hooks are functions of their inputs: what begin_step computes for the later hooks is its
// StepPlan, which train_step hands back micro-batch by micro-batch, never pipeline members that a
// later hook would have to match to its micro-batch; what finish_step needs arrives in the reduced
// statistics. frozen_models returns what it could not check in ModelSpec::note (attach logs it).
//
// Collective discipline: every hook from attach on runs on every rank in the same order, and must
// issue the same collectives on every rank (a rank whose micro-batch has no valid token still runs
// its units). Counts are reduced by train_step, never by a pipeline.
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/collate.h"
#include "data/sampler.h"
#include "model/lora.h"
#include "model/model_args.h"
#include "model/value_head.h"
#include "train/checkpointed.h"
#include "train/named_stats.h"
#include "train/train_config.h"

namespace wmtp {

class ConfigSet;
class TrainState;
class MetricsRecord;
class Communicator;
class Logger;
class MtpModel;
class PhaseTimer;
class ShardedModel;

enum class BatchKind { Pointwise, Pairwise };

// What a pipeline reads of the run's configuration beyond its own section: a copy, so nothing a
// pipeline does reaches another section (train/run_config.h fills it).
struct PipelineSettings {
  ModelConfig model;             // [model]
  LoraConfig lora;               // [lora]
  std::string init_weights;      // [training] init_weights: the trained model's starting checkpoint
  std::string train_data;        // [data] train: the training dataset (its tokenizer, for checks)
  LrScheduleConfig lr_schedule;  // [lr_schedule]: the schedule's shape (e.g. per-group lr metrics)
};

// Optimizer parameter groups a pipeline sets itself (first matching pattern wins; no patterns: the
// config's own [optimizer] groups). The trainer writes them into [optimizer] and refuses a config
// that sets other groups, naming `from`: the pipeline's keys they come from.
struct ParamGroups {
  std::vector<std::string> patterns;
  std::vector<double> lr, weight_decay;
  std::string from;
};

// How to build one model of a run. The trainer builds MtpModel(args, lora, value_head, freeze_base)
// and shards it; `frozen` models have every parameter frozen (adapters and value head included).
struct ModelSpec {
  std::string role = "policy";  // "policy", "critic", "reference": logs, --dry-run, errors
  ModelArgs args;               // resolved (vocab_size known)
  LoraConfig lora;
  ValueHeadConfig value_head;
  bool freeze_base = false;  // base weights not trained even without LoRA (a critic's frozen backbone)
  bool frozen = false;       // nothing trained: a model the pipeline only reads
  // Checkpoint to load after the seeded init: optional for the trained model ([training]
  // init_weights), required for frozen ones. An adapters-only ("lora") checkpoint is loaded on top
  // of the base it records.
  std::string weights;
  // Frozen models: the config key that names `weights` ("verifiable.critic"), and whether a resume may
  // go on with other weights than those the run's checkpoint records (the pipeline's override key,
  // `override_key`); without it such a resume is refused (train/run_models.h).
  std::string weights_key, override_key;
  bool allow_other_weights = false;
  // What the pipeline could not check about this model (e.g. a checkpoint without a tokenizer
  // fingerprint): attach() logs it as a warning.
  std::string note;
};

// A built model: the functional model and the engine holding its (sharded) weights.
struct ModelHandle {
  ModelSpec spec;
  std::unique_ptr<MtpModel> model;
  std::unique_ptr<ShardedModel> engine;
  std::string fingerprint;  // of the weights load_model_weights loaded ("" for the seeded init)
  ModelHandle();
  ModelHandle(ModelHandle&&) noexcept;
  ModelHandle& operator=(ModelHandle&&) noexcept;
  ~ModelHandle();
};

// What a pipeline works with once the trainer has built everything. Valid until the run ends.
struct RunContext {
  PipelineSettings settings;
  Communicator* comm = nullptr;                 // the engines' communicator (device tensors)
  c10::Device device = c10::Device(c10::kCPU);  // where the engines and the micro-batches live
  MPI_Comm world = MPI_COMM_NULL;               // MPI_COMM_WORLD, for agreement on errors (comm/agree.h)
  const Logger* log = nullptr;
  ModelHandle* trained = nullptr;
  std::vector<ModelHandle*> frozen;  // in frozen_models() order
  PhaseTimer* phases = nullptr;      // the step's phase timer (core/phase_timer.h), for MtpPassOptions::phases
};

// One micro-batch as the trainer loaded it. `filler` batches (validation only) carry no label and
// exist so every rank runs the same number of forwards.
struct MicroBatch {
  Batch batch;      // pointwise: the sequences; pairwise: the correct solutions
  Batch neg;        // pairwise: the incorrect solution of each pair (row i pairs with batch row i)
  Batch cpu_batch;  // `batch` as collated, in CPU memory: counts and row selection without a device sync
  Batch cpu_neg;    // pairwise: `neg` as collated, in CPU memory
  bool filler = false;
};

// What begin_step prepared for one micro-batch, handed to its forward_backward.
struct MicroBatchPlan {
  at::Tensor weights;   // the pipeline's per-token weights (rho1's selection, verifiable's TD weights); undefined: none
  NamedStats prepared;  // statistics begin_step measured (in the train layout), reported with the micro-batch's own
};

// What begin_step returns: the step's plan.
struct StepPlan {
  std::vector<MicroBatchPlan> micro_batches;  // one per micro-batch, in order
  // [micro-batches, C] float64: each micro-batch's normalizing counts (the policy's valid targets per
  // head, rho1's selected tokens per head, the critic's pairs and sequences), left where the loss
  // reads them (rho1's on the device, where its selection counts them; the critic's on the host,
  // where its loss branches on them). train_step reduces them (train_step.h): no pipeline does.
  at::Tensor counts;
};

// Where the step stands, for the step hooks.
struct StepContext {
  int64_t step = 0;  // optimizer steps completed before this one
  int64_t total_steps = 0;
  const BatchGeometry* geometry = nullptr;  // the run's (the trainer owns it): world size, accumulation
  LossNormalization normalization = LossNormalization::Global;  // [training] loss_normalization
};

class Pipeline : public Checkpointed {
 public:
  virtual ~Pipeline() = default;
  virtual std::string name() const = 0;  // "baseline"

  // ---- configuration
  virtual void add_config(ConfigSet&) {}  // its own section(s): set.add("name", cfg_)
  virtual BatchKind batch_kind() const { return BatchKind::Pointwise; }
  // Called once after the config is loaded, before anything is built (also by --dry-run): throws
  // Error(Usage) on bad values of its section or bad combinations with the settings.
  virtual void check(const PipelineSettings&) const {}
  virtual ParamGroups param_groups(const PipelineSettings&) const { return {}; }

  // ---- models. `data_vocab` is the training dataset's vocabulary size. These may read files (a
  // checkpoint's header, a directory's `latest`) that one node sees otherwise: the trainer calls them
  // inside agreed(), so what they find is one verdict on every rank, and they throw Local errors.
  virtual ModelSpec trained_model(const PipelineSettings& settings, int64_t data_vocab) const;
  virtual std::vector<ModelSpec> frozen_models(const PipelineSettings&, int64_t /*data_vocab*/) const { return {}; }
  virtual void attach(const RunContext& ctx) = 0;

  // ---- one optimizer step (collective)
  // The step's plan for this rank's micro-batches, before any backward (train/pipeline.h, StepPlan).
  virtual StepPlan begin_step(const StepContext&, const std::vector<MicroBatch>& mbs) = 0;
  // Forward + backward of one micro-batch with its part of the plan; gradients accumulate in the
  // trained engine. `counts` ([C] float64, where the plan left them) are what its loss is normalized
  // by: the step's, summed over every micro-batch of every rank, or under micro-batch normalization
  // its own scaled (train_step.h).
  virtual NamedStats forward_backward(const StepContext&, const MicroBatch& mb, const MicroBatchPlan& plan,
                                      const at::Tensor& counts) = 0;
  // After the optimizer step, on the statistics reduced over the step: fills `rec` with the
  // pipeline's train/* keys and returns the step loss (the trainer checks it is finite). Pipeline
  // state that follows the step (an EMA) is updated here.
  virtual double finish_step(const StepContext&, const NamedStats& global, MetricsRecord& rec) = 0;

  // ---- validation (collective)
  virtual NamedStats eval_batch(const MicroBatch& mb) = 0;
  // Fills val/* keys; returns the validation loss (lower is better).
  virtual double finish_eval(const NamedStats& global, MetricsRecord& rec) = 0;

  // ---- state saved in /train of every checkpoint and restored on resume (train/checkpointed.h):
  // none by default
  void save_state(TrainState&) const override {}
  void load_state(const TrainState&, const CheckpointReader&) override {}
};

// The policy's architecture: [model] resolved, its vocabulary taken from the training data when
// unset (and never smaller than the data's). Throws Error(Usage).
ModelArgs policy_model_args(const ModelConfig& mc, int64_t data_vocab);

}  // namespace wmtp
