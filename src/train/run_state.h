// The trainer's own checkpointed parts (train/checkpointed.h): where the run is (steps, samples, the
// best validation loss), where the data is (the cursor and what it counts in), the lr schedule's
// figures and the frozen models' fingerprints. Their /train keys (ckpt/train_keys.h) are those of
// every checkpoint since format v1, so older checkpoints resume.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "data/sampler.h"
#include "train/checkpointed.h"

namespace wmtp {

class LrSchedule;
struct ModelHandle;

// Optimizer steps done, samples consumed, the best validation loss so far (checkpoint.save_best), and
// the run's batch geometry they were counted in (a resume with another global batch is noted).
struct RunProgress final : Checkpointed {
  int64_t step = 0;
  int64_t consumed_samples = 0;
  double best_val_loss = INFINITY;
  const BatchGeometry* geometry = nullptr;  // the run's (the trainer owns it)
  int64_t saved_world_size = 0;             // of the checkpoint resumed from (0: unknown)

  void save_state(TrainState& st) const override;
  std::vector<std::string> check_state(const TrainState& st, const CheckpointReader& file) const override;
  void load_state(const TrainState& st, const CheckpointReader& file) override;
};

// Where the next step's data starts, and the sample selection and tokenizer it counts in (a resume
// over another selection is noted: the cursor no longer points at the same items).
struct DataPosition final : Checkpointed {
  DataCursor cursor;
  uint64_t sampler_fingerprint = 0;
  std::string tokenizer_fingerprint;  // which tokenizer made the ids this model learns

  void save_state(TrainState& st) const override;
  std::vector<std::string> check_state(const TrainState& st, const CheckpointReader& file) const override;
  void load_state(const TrainState& st, const CheckpointReader& file) override;
};

// The schedule is a pure function of the step (train/lr_schedule.h): its total and the next step's
// lr are written for readers of the checkpoint; a resume that plans another total is noted.
struct LrScheduleState final : Checkpointed {
  const LrSchedule* schedule = nullptr;
  const RunProgress* progress = nullptr;

  void save_state(TrainState& st) const override;
  std::vector<std::string> check_state(const TrainState& st, const CheckpointReader& file) const override;
  void load_state(const TrainState&, const CheckpointReader&) override {}
};

// The fingerprints of the frozen models a run trains against (train/run_models.h): a resume must
// read the same ones (checked before anything else of the checkpoint is read).
struct FrozenModelsState final : Checkpointed {
  const std::vector<ModelHandle>* frozen = nullptr;

  void save_state(TrainState& st) const override;
  std::vector<std::string> check_state(const TrainState& st, const CheckpointReader& file) const override;
  void load_state(const TrainState&, const CheckpointReader&) override {}
};

}  // namespace wmtp
