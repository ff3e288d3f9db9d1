// train-rho1: Fine-tune an MTP policy with Rho-1 token selection: keep the tokens whose excess loss against a frozen reference model is in the top k_percent.
// Thin main: everything lives in the library. Not implemented yet: a later issue fills it in.
#include "app/program.h"
#include "core/error.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-rho1",
                      "Fine-tune an MTP policy with Rho-1 token selection: keep the tokens whose excess loss against a frozen reference model is in the top k_percent.",
                      "srun bin/train-rho1 -c configs/rho1.toml"});
  prog.with_config_options();
  return prog.run([](wmtp::ProgramContext&) -> int {
    wmtp::throw_usage("train-rho1 is not implemented yet");
  });
}
