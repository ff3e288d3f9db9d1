// Checkpointed: a part of a run that must survive a resume and says so itself. The parts: the
// trained model (its tensors in /model) and the optimizer (/optim; train/train_checkpoint.h), the
// run's progress, the data position, the lr schedule, the frozen models' fingerprints
// (train/run_state.h) and the pipeline (its own state, e.g. verifiable's TD EMA). Each writes its own
// keys into a checkpoint's /train group (their names: ckpt/train_keys.h) or its own tensor groups, and
// reads them back; the trainer only lists the parts (trainer.cpp, `checkpointed`). RNG streams are not
// saved: they are reseeded from (seed, step, rank) every step.
//
// A resume (train/train_checkpoint.h, resume_training) opens the file and reads its /train once, runs
// every part's check_state on that (no tensor is read yet, so a checkpoint the run cannot go on from
// is refused before any is), then every part's load_state.
#pragma once
#include <initializer_list>
#include <string>
#include <vector>

namespace wmtp {

class CheckpointReader;
class CheckpointWriter;
class TrainState;

class Checkpointed {
 public:
  virtual ~Checkpointed() = default;
  // Writes this part's /train keys (every rank holds the same values; rank 0's are written).
  virtual void save_state(TrainState& st) const = 0;
  // Writes this part's tensor groups, for a part held in tensors (collective).
  virtual void write_tensors(CheckpointWriter&) const {}
  // Whether the run can resume from `file`, whose /train is `st`, reading no tensor data: throws
  // (naming the key or tensor) when it cannot; returns notes for the log on what no longer matches
  // the running configuration but does not stop the resume. Changes nothing: when the file turns out
  // damaged as it loads, another one is tried.
  virtual std::vector<std::string> check_state(const TrainState&, const CheckpointReader&) const { return {}; }
  // Restores this part from `file` (collective for a part held in tensors).
  virtual void load_state(const TrainState& st, const CheckpointReader& file) = 0;
};

// For check_state: an Error(Input) naming `file` and the first of `keys` its /train lacks, then `why`
// as it is (", which ..."; every rank read the same /train: the same verdict everywhere).
void require_train_keys(const TrainState& st, const CheckpointReader& file, std::initializer_list<std::string> keys,
                        const std::string& why);

}  // namespace wmtp
