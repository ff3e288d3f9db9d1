// Range checks of [training], [lr_schedule] and [logging] (types and finiteness are checked by
// ConfigSet when the TOML is read; these are the limits a value of the right type must respect).
#include "train/train_config.h"

#include "core/error.h"

namespace wmtp {

void TrainingConfig::validate() const {
  if (max_steps < 0) throw_usage("[training] max_steps = ", max_steps, ": expected >= 0 (0 = use n_epochs)");
  if (max_steps == 0 && !(n_epochs > 0))
    throw_usage("[training] n_epochs = ", n_epochs, ": expected > 0 (or set max_steps)");
  if (n_epochs < 0) throw_usage("[training] n_epochs = ", n_epochs, ": expected >= 0");
  if (global_batch_size < 1) throw_usage("[training] global_batch_size = ", global_batch_size, ": expected >= 1");
  if (micro_batch_size < 1) throw_usage("[training] micro_batch_size = ", micro_batch_size, ": expected >= 1");
  if (seed < 0) throw_usage("[training] seed = ", seed, ": expected >= 0");
  if (eval_every < 0) throw_usage("[training] eval_every = ", eval_every, ": expected >= 0 (0 = at checkpoints)");
  if (stop_after_steps < 0)
    throw_usage("[training] stop_after_steps = ", stop_after_steps, ": expected >= 0 (0 = never)");
  if (run_dir.empty()) throw_usage("[training] run_dir must not be empty");
}

void LrScheduleConfig::validate() const {
  if (!(warmup_ratio >= 0 && warmup_ratio <= 1))
    throw_usage("[lr_schedule] warmup_ratio = ", warmup_ratio, ": expected a value in [0, 1]");
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1))
    throw_usage("[lr_schedule] min_lr_ratio = ", min_lr_ratio, ": expected a value in [0, 1]");
}

void LoggingConfig::validate() const {
  if (log_interval < 1) throw_usage("[logging] log_interval = ", log_interval, ": expected >= 1");
  if (peak_tflops < 0) throw_usage("[logging] peak_tflops = ", peak_tflops, ": expected >= 0 (0 = measure)");
  tracking.validate();
  if (profile_steps < 0) throw_usage("[logging] profile_steps = ", profile_steps, ": expected >= 0 (0 = no trace)");
  if (profile_warmup < 0) throw_usage("[logging] profile_warmup = ", profile_warmup, ": expected >= 0");
}

}  // namespace wmtp
