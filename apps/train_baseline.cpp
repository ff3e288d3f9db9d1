// train-baseline: Fine-tune a multi-token-prediction LLaMA policy with uniform token weights (weighted MTP cross-entropy), sharded over all ranks (FSDP semantics), with resume, checkpoints and metrics.
// Thin main: everything lives in the library. Not implemented yet: a later issue fills it in.
#include "app/program.h"
#include "core/error.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-baseline",
                      "Fine-tune a multi-token-prediction LLaMA policy with uniform token weights (weighted MTP cross-entropy), sharded over all ranks (FSDP semantics), with resume, checkpoints and metrics.",
                      "srun bin/train-baseline -c configs/baseline.toml --set training.n_epochs=1"});
  prog.with_config_options();
  return prog.run([](wmtp::ProgramContext&) -> int {
    wmtp::throw_usage("train-baseline is not implemented yet");
  });
}
