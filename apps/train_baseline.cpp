// train-baseline: MTP fine-tuning with uniform token weights (the weighted MTP loss with w = 1).
// Thin main over the trainer; train-rho1/verifiable differ only in the token weighting of
// their MtpPolicyPipeline, train-critic in the Pipeline it plugs in.
#include "app/train_program.h"
#include "pipelines/mtp_pipeline.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-baseline",
                      "Fine-tune a multi-token-prediction LLaMA policy with uniform token weights (weighted MTP "
                      "cross-entropy), sharded over all ranks (FSDP semantics), with resume, checkpoints and metrics. "
                      "Config sections: [model] [data] [training] [optimizer] [lr_schedule] [sharding] [lora] "
                      "[checkpoint] [logging]; --print-config shows every key with its value.",
                      "mpirun -np 2 bin/train-baseline -c configs/tiny.toml --set training.max_steps=20"});
  prog.with_config_options();
  prog.stop_on_signals();
  return prog.run([](wmtp::ProgramContext& ctx) -> int {
    wmtp::MtpPolicyPipeline pipeline(std::make_unique<wmtp::UniformWeighting>());
    return wmtp::run_train_program(ctx, pipeline);
  });
}
