// Checkpointed: a part of a run that must survive a resume and says so itself. Each one writes its
// own keys into a checkpoint's /train group (ckpt/train_state.h) and reads them back on resume; the
// trainer only lists the parts (trainer.cpp, `checkpointed`), so no key is spelled in two places.
// The parts: the run's progress, the data position, the lr schedule, the frozen models' fingerprints
// (train/run_state.h) and the pipeline (its own state, e.g. verifiable's TD EMA). The optimizer's
// moments are tensors and go to /optim through the checkpoint writer; RNG streams are not saved:
// they are reseeded from (seed, step, rank) every step.
#pragma once
#include <string>
#include <vector>

namespace wmtp {

class TrainState;

class Checkpointed {
 public:
  virtual ~Checkpointed() = default;
  // Writes this part's keys (every rank holds the same values; rank 0's are written).
  virtual void save_state(TrainState& st) const = 0;
  // Restores from `st`, read from `checkpoint` (for messages). Throws (naming the key) when the
  // checkpoint cannot be resumed; returns notes for the log on what no longer matches the running
  // configuration but does not stop the resume.
  virtual std::vector<std::string> load_state(const TrainState& st, const std::string& checkpoint) = 0;
};

}  // namespace wmtp
