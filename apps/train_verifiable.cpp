// train-verifiable: MTP fine-tuning with token weights from a frozen critic (reward-free GAE,
// EMA-whitened exponential weights; pipelines/verifiable_pipeline.h). Thin main over the trainer.
#include "app/train_program.h"
#include "pipelines/mtp_pipeline.h"
#include "pipelines/verifiable_pipeline.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-verifiable",
                      "Fine-tune a multi-token-prediction LLaMA policy on correct solutions with per-token weights "
                      "from a frozen critic (a train-critic checkpoint): critic values -> reward-free GAE -> "
                      "EMA-whitened, clamped exponential weights of the target tokens. The policy (full or LoRA) "
                      "and the critic are sharded over all ranks; the TD EMA is saved in every checkpoint. "
                      "Config sections: [model] [data] [training] [optimizer] [lr_schedule] [sharding] [lora] "
                      "[checkpoint] [logging] [verifiable]; --print-config shows every key with its value.",
                      "mpirun -np 2 bin/train-verifiable -c configs/tiny-verifiable.toml"});
  prog.with_config_options();
  prog.stop_on_signals();
  return prog.run([](wmtp::ProgramContext& ctx) -> int {
    wmtp::MtpPolicyPipeline pipeline(std::make_unique<wmtp::VerifiableWeighting>());
    return wmtp::run_train_program(ctx, pipeline);
  });
}
