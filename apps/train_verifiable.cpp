// train-verifiable: Fine-tune an MTP policy with token weights from a frozen critic (reward-free GAE, EMA-whitened exponential weights).
// Thin main over the trainer. The verifiable loss is not implemented yet: configs are parsed and
// --print-config / --dry-run work; training exits 2 saying so.
#include "app/train_program.h"
#include "train/pipeline.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-verifiable",
                      "Fine-tune an MTP policy with token weights from a frozen critic (reward-free GAE, EMA-whitened exponential weights).",
                      "srun bin/train-verifiable -c configs/verifiable.toml"});
  prog.with_config_options();
  return prog.run([](wmtp::ProgramContext& ctx) -> int {
    wmtp::PendingPipeline pipeline("verifiable");
    return wmtp::run_train_program(ctx, pipeline);
  });
}
