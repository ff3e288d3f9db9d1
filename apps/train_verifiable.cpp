// train-verifiable: Fine-tune an MTP policy with token weights from a frozen critic (reward-free GAE, EMA-whitened exponential weights).
// Thin main: everything lives in the library. Training itself is not implemented yet: the
// config is parsed and checked so --print-config and config errors already behave as documented.
#include "app/program.h"
#include "core/error.h"
#include "train/train_config.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-verifiable",
                      "Fine-tune an MTP policy with token weights from a frozen critic (reward-free GAE, EMA-whitened exponential weights).",
                      "srun bin/train-verifiable -c configs/verifiable.toml"});
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
    wmtp::throw_usage("train-verifiable is not implemented yet");
  });
}
