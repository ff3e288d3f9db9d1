// train-rho1: Fine-tune an MTP policy with Rho-1 token selection: keep the tokens whose excess loss against a frozen reference model is in the top k_percent.
// Thin main over the trainer. The rho1 loss is not implemented yet: configs are parsed and
// --print-config / --dry-run work; training exits 2 saying so.
#include "app/train_program.h"
#include "train/pipeline.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-rho1",
                      "Fine-tune an MTP policy with Rho-1 token selection: keep the tokens whose excess loss against a frozen reference model is in the top k_percent.",
                      "srun bin/train-rho1 -c configs/rho1.toml"});
  prog.with_config_options();
  return prog.run([](wmtp::ProgramContext& ctx) -> int {
    wmtp::PendingPipeline pipeline("rho1");
    return wmtp::run_train_program(ctx, pipeline);
  });
}
