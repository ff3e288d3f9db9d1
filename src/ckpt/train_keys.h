// The keys of a checkpoint's /train group (ckpt/train_state.h), each spelled once: the parts that
// write and read them (train/run_state.h, train/run_models.h, the pipelines) and the tools that read a
// checkpoint's /train (merge-lora keeps the tokenizer's fingerprint) all name them from here. The
// spellings are those of format v1 (docs/checkpoint-format.md), so every checkpoint written since
// resumes.
#pragma once

namespace wmtp::train_keys {

// RunProgress: where the run is.
inline constexpr const char* kStep = "step";  // optimizer steps done
inline constexpr const char* kConsumedSamples = "consumed_samples";
inline constexpr const char* kBestValLoss = "checkpoint.best_val_loss";  // only once a validation ran
inline constexpr const char* kGlobalBatchSize = "global_batch_size";
inline constexpr const char* kWorldSize = "world_size";  // ranks of the run that saved it

// DataPosition: where the data is, and what it counts in.
inline constexpr const char* kDataEpoch = "data.epoch";
inline constexpr const char* kDataPosition = "data.position";
inline constexpr const char* kDataSamplerFingerprint = "data.sampler_fingerprint";
inline constexpr const char* kDataTokenizerFingerprint = "data.tokenizer_fingerprint";

// LrScheduleState: the schedule's figures, for readers of the checkpoint.
inline constexpr const char* kLrScheduleTotalSteps = "lr_schedule.total_steps";
inline constexpr const char* kLrScheduleLr = "lr_schedule.lr";  // the next step's

// FrozenModelsState: per frozen model, <kFrozenPrefix><role><kFrozenWeights | kFrozenFingerprint>.
inline constexpr const char* kFrozenPrefix = "frozen.";
inline constexpr const char* kFrozenWeights = ".weights";          // the resolved file
inline constexpr const char* kFrozenFingerprint = ".fingerprint";  // its content fingerprint

// train-verifiable's TD EMA: <kTdEma><kTdEmaMean | kTdEmaStd | kTdEmaStepCount>.
inline constexpr const char* kTdEma = "verifiable.td_ema";
inline constexpr const char* kTdEmaMean = ".mean";
inline constexpr const char* kTdEmaStd = ".std";
inline constexpr const char* kTdEmaStepCount = ".step_count";

}  // namespace wmtp::train_keys
