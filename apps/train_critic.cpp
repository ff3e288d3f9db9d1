// train-critic: a value model (LLaMA backbone + value head) trained on correct/incorrect solution
// pairs. Thin main over the trainer; the pipeline is pipelines/critic_pipeline.h.
#include "app/train_program.h"
#include "pipelines/critic_pipeline.h"

int main(int argc, char** argv) {
  wmtp::Program prog(
      argc, argv,
      {"train-critic",
       "Train a critic: a value head on the final-normed hidden state of a LLaMA backbone (an imported "
       "NTP model, or the trunk + head 0 of an MTP checkpoint, via [training] init_weights), frozen, "
       "LoRA or fully trained, on pairs of correct and incorrect solutions with the pairwise "
       "Bradley-Terry or the lambda-return loss, sharded over all ranks. Config sections: [model] [data] "
       "[training] [optimizer] [lr_schedule] [sharding] [lora] [checkpoint] [logging] [critic]; "
       "--print-config shows every key with its value.",
       "mpirun -np 2 bin/train-critic -c configs/tiny-critic.toml"});
  prog.with_config_options();
  prog.stop_on_signals();
  return prog.run([](wmtp::ProgramContext& ctx) -> int {
    wmtp::CriticPipeline pipeline;
    return wmtp::run_train_program(ctx, pipeline);
  });
}
