// convert-checkpoint: Move weights between wmtp HDF5 checkpoints and safetensors (Meta or HF names): import, export, inspect, verify.
// Thin main: everything lives in the library. Not implemented yet: a later issue fills it in.
#include "app/program.h"
#include "core/error.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"convert-checkpoint",
                      "Move weights between wmtp HDF5 checkpoints and safetensors (Meta or HF names): import, export, inspect, verify.",
                      "bin/convert-checkpoint export --input checkpoints/run/step_00000100.h5 --output out/ --names hf --dtype bf16"});
  return prog.run([](wmtp::ProgramContext&) -> int {
    wmtp::throw_usage("convert-checkpoint is not implemented yet");
  });
}
