// The trainer's checkpointed parts (train/run_state.h).
#include "train/run_state.h"

#include "ckpt/checkpoint.h"
#include "ckpt/train_keys.h"
#include "ckpt/train_state.h"
#include "core/error.h"
#include "train/lr_schedule.h"
#include "train/run_models.h"

namespace wmtp {

using namespace train_keys;

void RunProgress::save_state(TrainState& st) const {
  st.set_int(kStep, step);
  st.set_int(kConsumedSamples, consumed_samples);
  if (std::isfinite(best_val_loss)) st.set_double(kBestValLoss, best_val_loss);
  st.set_int(kGlobalBatchSize, geometry->global_batch_size);
  st.set_int(kWorldSize, geometry->world_size);
}

std::vector<std::string> RunProgress::check_state(const TrainState& st, const CheckpointReader& file) const {
  require_train_keys(st, file, {kStep}, ", the optimizer steps it was saved after");
  if (st.has(kGlobalBatchSize) && st.get_int(kGlobalBatchSize) != geometry->global_batch_size)
    return {detail::concat("resuming with global_batch_size ", geometry->global_batch_size, " (checkpoint: ",
                           st.get_int(kGlobalBatchSize), "): steps no longer map to the same batches")};
  return {};
}

void RunProgress::load_state(const TrainState& st, const CheckpointReader&) {
  step = st.get_int(kStep);
  consumed_samples = st.get_int_or(kConsumedSamples, 0);
  best_val_loss = st.get_double_or(kBestValLoss, INFINITY);
  saved_world_size = st.get_int_or(kWorldSize, 0);
}

void DataPosition::save_state(TrainState& st) const {
  st.set_int(kDataEpoch, cursor.epoch);
  st.set_int(kDataPosition, cursor.position);
  st.set_int(kDataSamplerFingerprint, int64_t(sampler_fingerprint));
  st.set_string(kDataTokenizerFingerprint, tokenizer_fingerprint);
}

std::vector<std::string> DataPosition::check_state(const TrainState& st, const CheckpointReader& file) const {
  require_train_keys(st, file, {kDataEpoch, kDataPosition}, ", where the next step's data starts");
  if (st.has(kDataSamplerFingerprint) && uint64_t(st.get_int(kDataSamplerFingerprint)) != sampler_fingerprint)
    return {detail::concat("resuming from ", file.header().path, " with a different sample selection (data or [data] ",
                           "config changed): the data cursor no longer points at the same items")};
  return {};
}

void DataPosition::load_state(const TrainState& st, const CheckpointReader&) {
  cursor.epoch = st.get_int(kDataEpoch);
  cursor.position = st.get_int(kDataPosition);
}

void LrScheduleState::save_state(TrainState& st) const {
  st.set_int(kLrScheduleTotalSteps, schedule->total_steps());
  st.set_double(kLrScheduleLr, schedule->lr_at(progress->step));
}

std::vector<std::string> LrScheduleState::check_state(const TrainState& st, const CheckpointReader&) const {
  if (st.has(kLrScheduleTotalSteps) && st.get_int(kLrScheduleTotalSteps) != schedule->total_steps())
    return {detail::concat("the lr schedule now runs over ", schedule->total_steps(), " steps (checkpoint: ",
                           st.get_int(kLrScheduleTotalSteps), "): the learning rate follows the new curve from here")};
  return {};
}

void FrozenModelsState::save_state(TrainState& st) const { record_frozen_models(st, *frozen); }

std::vector<std::string> FrozenModelsState::check_state(const TrainState& st, const CheckpointReader& file) const {
  return check_frozen_models(st, *frozen, file.header().path);
}

}  // namespace wmtp
