// merge-lora: Merge a LoRA checkpoint into its base model (W += alpha/r * B A in fp32) and write a model-only HDF5 checkpoint or safetensors; import/export PEFT adapters.
// Thin main: everything lives in the library. Not implemented yet: a later issue fills it in.
#include "app/program.h"
#include "core/error.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"merge-lora",
                      "Merge a LoRA checkpoint into its base model (W += alpha/r * B A in fp32) and write a model-only HDF5 checkpoint or safetensors; import/export PEFT adapters.",
                      "bin/merge-lora --base checkpoints/base/model.h5 --lora checkpoints/run/step_00000100.h5 --output merged.h5"});
  return prog.run([](wmtp::ProgramContext&) -> int {
    wmtp::throw_usage("merge-lora is not implemented yet");
  });
}
