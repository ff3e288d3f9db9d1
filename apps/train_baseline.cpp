// train-baseline: MTP fine-tuning with uniform token weights (the weighted MTP loss with w = 1).
// Thin main over the trainer; train-rho1/verifiable/critic differ only in the Pipeline they plug in.
#include "app/program.h"
#include "core/config.h"
#include "train/pipeline.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"train-baseline",
                      "Fine-tune a multi-token-prediction LLaMA policy with uniform token weights (weighted MTP "
                      "cross-entropy), sharded over all ranks (FSDP semantics), with resume, checkpoints and metrics. "
                      "Config sections: [model] [data] [training] [optimizer] [lr_schedule] [sharding] [lora] "
                      "[checkpoint] [logging]; --print-config shows every key with its value.",
                      "mpirun -np 2 bin/train-baseline -c configs/tiny.toml --set training.max_steps=20"});
  prog.with_config_options();
  return prog.run([](wmtp::ProgramContext& ctx) -> int {
    wmtp::TrainerConfigs cfg;
    wmtp::BaselinePipeline pipeline;
    wmtp::ConfigSet set;
    wmtp::register_trainer_sections(set, cfg);
    pipeline.add_config(set);
    if (!wmtp::Program::load_config(ctx, set)) return 0;
    if (ctx.common.dry_run) {
      wmtp::print_dry_run(cfg, ctx.common.plan_world_size > 0 ? ctx.common.plan_world_size : ctx.mpi.world_size(), ctx.log);
      return 0;
    }
    wmtp::Trainer trainer(ctx.mpi, ctx.log, cfg, pipeline, set.to_toml());
    return trainer.run();
  });
}
