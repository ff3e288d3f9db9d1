// train-critic: Train a value head (pairwise or lambda-return loss) on a frozen or LoRA LLaMA backbone.
// Thin main over the trainer. The critic loss is not implemented yet: configs are parsed and
// --print-config / --dry-run work; training exits 2 saying so.
#include "app/train_program.h"
#include "train/pipeline.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-critic",
                      "Train a value head (pairwise or lambda-return loss) on a frozen or LoRA LLaMA backbone.",
                      "srun bin/train-critic -c configs/critic.toml"});
  prog.with_config_options();
  return prog.run([](wmtp::ProgramContext& ctx) -> int {
    wmtp::PendingPipeline pipeline("critic");
    return wmtp::run_train_program(ctx, pipeline);
  });
}
