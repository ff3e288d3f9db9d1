// train-rho1: selective MTP fine-tuning (Rho-1): each head trains only on the tokens whose excess
// loss over a frozen next-token reference model is in the top k_percent of the optimizer step.
// Thin main over the trainer; the arithmetic is Rho1Weighting (src/pipelines/rho1_pipeline.h)
// in the MTP policy pipeline.
#include "app/train_program.h"
#include "pipelines/mtp_pipeline.h"
#include "pipelines/rho1_pipeline.h"

int main(int argc, char** argv) {
  wmtp::Program prog(
      argc, argv,
      {"train-rho1",
       "Fine-tune a multi-token-prediction LLaMA policy with Rho-1 token selection: per head, only the "
       "top [rho1] k_percent of tokens by excess loss (policy CE minus the CE of a frozen next-token "
       "reference model predicting the same token) are trained, selected exactly over the whole "
       "optimizer step on every rank (scope = \"global\") or per micro-batch (\"local\", weighted_mtp). "
       "Make the reference with train-baseline --set model.n_future_tokens=1 on correct solutions "
       "(or convert-checkpoint import); it must use the policy's tokenizer. Config sections: [model] "
       "[data] [training] [optimizer] [lr_schedule] [sharding] [lora] [checkpoint] [logging] [rho1]; "
       "--print-config shows every key with its value. docs/rho1.md explains the method.",
       "mpirun -np 2 bin/train-rho1 -c configs/tiny-rho1.toml --set rho1.reference=runs/tiny-ref/checkpoints"});
  prog.with_config_options();
  prog.stop_on_signals();
  return prog.run([](wmtp::ProgramContext& ctx) -> int {
    wmtp::MtpPolicyPipeline pipeline(std::make_unique<wmtp::Rho1Weighting>());
    return wmtp::run_train_program(ctx, pipeline);
  });
}
