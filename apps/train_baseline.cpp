// train-baseline: Fine-tune a multi-token-prediction LLaMA policy with uniform token weights (weighted MTP cross-entropy), sharded over all ranks (FSDP semantics), with resume, checkpoints and metrics.
// Thin main: everything lives in the library. Training itself is not implemented yet: the
// config is parsed and checked so --print-config and config errors already behave as documented.
#include "app/program.h"
#include "core/error.h"
#include "train/train_config.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-baseline",
                      "Fine-tune a multi-token-prediction LLaMA policy with uniform token weights (weighted MTP cross-entropy), sharded over all ranks (FSDP semantics), with resume, checkpoints and metrics.",
                      "srun bin/train-baseline -c configs/baseline.toml --set training.n_epochs=1"});
  prog.with_config_options();
  return prog.run([](wmtp::ProgramContext& ctx) -> int {
    // The config is parsed (and errors reported) already; training arrives with the trainer issue.
    wmtp::TrainingConfig training;
    wmtp::LrScheduleConfig lr_schedule;
    wmtp::LoggingConfig logging;
    wmtp::ConfigSet config;
    config.add("training", training);
    config.add("lr_schedule", lr_schedule);
    config.add("logging", logging);
    if (!wmtp::Program::load_config(ctx, config)) return 0;
    wmtp::throw_usage("train-baseline is not implemented yet");
  });
}
