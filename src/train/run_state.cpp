// The trainer's checkpointed parts (train/run_state.h).
#include "train/run_state.h"

#include "ckpt/train_state.h"
#include "core/error.h"
#include "train/lr_schedule.h"
#include "train/run_models.h"

namespace wmtp {

void RunProgress::save_state(TrainState& st) const {
  st.set_int("step", step);
  st.set_int("consumed_samples", consumed_samples);
  if (std::isfinite(best_val_loss)) st.set_double("checkpoint.best_val_loss", best_val_loss);
  st.set_int("global_batch_size", global_batch_size);
  st.set_int("world_size", world_size);
}

std::vector<std::string> RunProgress::load_state(const TrainState& st, const std::string&) {
  step = st.get_int("step");
  consumed_samples = st.get_int_or("consumed_samples", 0);
  best_val_loss = st.get_double_or("checkpoint.best_val_loss", INFINITY);
  saved_world_size = st.get_int_or("world_size", 0);
  if (st.has("global_batch_size") && st.get_int("global_batch_size") != global_batch_size)
    return {detail::concat("resuming with global_batch_size ", global_batch_size, " (checkpoint: ",
                           st.get_int("global_batch_size"), "): steps no longer map to the same batches")};
  return {};
}

void DataPosition::save_state(TrainState& st) const {
  st.set_int("data.epoch", cursor.epoch);
  st.set_int("data.position", cursor.position);
  st.set_int("data.sampler_fingerprint", int64_t(sampler_fingerprint));
  st.set_string("data.tokenizer_fingerprint", tokenizer_fingerprint);
}

std::vector<std::string> DataPosition::load_state(const TrainState& st, const std::string& checkpoint) {
  cursor.epoch = st.get_int("data.epoch");
  cursor.position = st.get_int("data.position");
  if (st.has("data.sampler_fingerprint") && uint64_t(st.get_int("data.sampler_fingerprint")) != sampler_fingerprint)
    return {detail::concat("resuming from ", checkpoint, " with a different sample selection (data or [data] config ",
                           "changed): the data cursor no longer points at the same items")};
  return {};
}

void LrScheduleState::save_state(TrainState& st) const {
  st.set_int("lr_schedule.total_steps", schedule->total_steps());
  st.set_double("lr_schedule.lr", schedule->lr_at(progress->step));
}

std::vector<std::string> LrScheduleState::load_state(const TrainState& st, const std::string&) {
  if (st.has("lr_schedule.total_steps") && st.get_int("lr_schedule.total_steps") != schedule->total_steps())
    return {detail::concat("the lr schedule now runs over ", schedule->total_steps(), " steps (checkpoint: ",
                           st.get_int("lr_schedule.total_steps"),
                           "): the learning rate follows the new curve from here")};
  return {};
}

void FrozenModelsState::save_state(TrainState& st) const { record_frozen_models(st, *frozen); }

std::vector<std::string> FrozenModelsState::load_state(const TrainState& st, const std::string& checkpoint) {
  return check_frozen_models(st, *frozen, checkpoint);
}

}  // namespace wmtp
