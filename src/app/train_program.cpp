// run_train_program: config -> (print | dry run | Trainer::run).
#include "app/train_program.h"

#include "core/check.h"
#include "core/config.h"
#include "core/error.h"
#include "plan/dry_run.h"
#include "train/pipeline.h"
#include "train/trainer.h"

namespace wmtp {

int run_train_program(ProgramContext& ctx, Pipeline& pipeline) {
  TrainerConfigs cfg;
  ConfigSet set;
  register_trainer_sections(set, cfg);
  pipeline.add_config(set);
  if (!Program::load_config(ctx, set)) return 0;
  validate_trainer_configs(cfg);
  ctx.log.set_level(cfg.logging.level);  // before any work, the dry run's too: a bad value is one message, exit 2
  if (ctx.common.dry_run) {
    print_dry_run(cfg, pipeline, ctx.common.plan_world_size > 0 ? ctx.common.plan_world_size : ctx.mpi.world_size(),
                  ctx.log);
    return 0;
  }
  configure_run(cfg, pipeline);
  WMTP_CHECK(ctx.signals, "a train program without stop_on_signals(): SIGTERM would kill it mid-checkpoint");
  Trainer trainer(ctx.mpi, ctx.log, cfg, pipeline, set.to_toml(), *ctx.signals);
  return trainer.run();
}

}  // namespace wmtp
