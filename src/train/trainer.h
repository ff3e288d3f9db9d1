// Trainer: the one training loop every train-* program runs (docs/training.md).
//
//   TrainerConfigs cfg;  ConfigSet set;  register_trainer_sections(set, cfg);  ... load TOML ...
//   Trainer trainer(mpi, log, cfg, pipeline, toml, signals);  // builds models, optimizer, data; resumes
//   return trainer.run();   // 0 done; 75 stopped on a signal (after a checkpoint, or during start-up)
//
// A step (train/train_step.h): the global batch of step s (same items at any world size), this
// rank's micro-batches, the pipeline's plan of them with its counts (e.g. valid tokens per head)
// all-reduced once, each micro-batch's forward/backward normalized by those global counts
// (gradients reduce-scattered as sums inside backward), clip, AdamW, schedule.
// Checkpoints and validation at their cadences; SIGTERM/SIGUSR1 stop at the next step boundary, or
// during start-up at the next phase boundary (datasets opened, each model built and loaded, resume
// checkpoint loaded) with nothing written.
// Randomness (dropout) is reseeded from (seed, step, rank) at every step, so a resumed run draws
// the same numbers without saving generator state.
#pragma once
#include <memory>
#include <string>

#include "core/log.h"
#include "train/pipeline.h"
#include "train/run_config.h"

namespace wmtp {

class MpiEnv;
class StopSignals;

class Trainer {
 public:
  // `cfg`: validated (validate_trainer_configs) and completed for `pipeline` (configure_run), as
  // app/train_program.cpp does. `signals`: installed by the program (app/program.h stop_on_signals),
  // polled from here on.
  Trainer(MpiEnv& mpi, Logger log, const TrainerConfigs& cfg, Pipeline& pipeline, std::string resolved_config,
          StopSignals& signals);
  ~Trainer();
  int run();  // 0: finished; 75: stopped on a signal (after checkpointing, or during start-up)

  struct State;  // everything the run owns (trainer.cpp)

 private:
  std::unique_ptr<State> s_;
};

}  // namespace wmtp
