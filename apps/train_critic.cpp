// train-critic: Train a value head (pairwise or lambda-return loss) on a frozen or LoRA LLaMA backbone.
// Thin main: everything lives in the library. Not implemented yet: a later issue fills it in.
#include "app/program.h"
#include "core/error.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-critic",
                      "Train a value head (pairwise or lambda-return loss) on a frozen or LoRA LLaMA backbone.",
                      "srun bin/train-critic -c configs/critic.toml"});
  prog.with_config_options();
  return prog.run([](wmtp::ProgramContext&) -> int {
    wmtp::throw_usage("train-critic is not implemented yet");
  });
}
