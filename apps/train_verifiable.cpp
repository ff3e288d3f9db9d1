// train-verifiable: Fine-tune an MTP policy with token weights from a frozen critic (reward-free GAE, EMA-whitened exponential weights).
// Thin main: everything lives in the library. Not implemented yet: a later issue fills it in.
#include "app/program.h"
#include "core/error.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-verifiable",
                      "Fine-tune an MTP policy with token weights from a frozen critic (reward-free GAE, EMA-whitened exponential weights).",
                      "srun bin/train-verifiable -c configs/verifiable.toml"});
  prog.with_config_options();
  return prog.run([](wmtp::ProgramContext&) -> int {
    wmtp::throw_usage("train-verifiable is not implemented yet");
  });
}
