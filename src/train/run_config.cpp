// The run's configuration and what the pipeline declares into it (train/run_config.h).
#include "train/run_config.h"

#include "core/config.h"
#include "core/error.h"

namespace wmtp {

void register_trainer_sections(ConfigSet& set, TrainerConfigs& cfg) {
  set.add("model", cfg.model);
  set.add("data", cfg.data);
  set.add("training", cfg.training);
  set.add("optimizer", cfg.optimizer);
  set.add("lr_schedule", cfg.lr_schedule);
  set.add("sharding", cfg.sharding);
  set.add("lora", cfg.lora);
  set.add("checkpoint", cfg.checkpoint);
  set.add("logging", cfg.logging);
  set.add("runtime", cfg.runtime);
}

void validate_trainer_configs(const TrainerConfigs& cfg) {
  cfg.data.validate();
  cfg.training.validate();
  cfg.optimizer.validate();
  cfg.lr_schedule.validate();
  cfg.logging.validate();
  cfg.sharding.validate();
  validate_checkpoint_config(cfg.checkpoint);
}

PipelineSettings pipeline_settings(const TrainerConfigs& cfg) {
  PipelineSettings s;
  s.model = cfg.model;
  s.lora = cfg.lora;
  s.lr_schedule = cfg.lr_schedule;
  s.init_weights = cfg.training.init_weights;
  s.train_data = cfg.data.train;
  return s;
}

namespace {
// The pipeline's groups replace [optimizer] group_*; a user's own groups would be silently dropped.
void apply_param_groups(const std::string& program, const ParamGroups& g, OptimizerConfig& opt) {
  if (g.patterns.empty()) return;
  if (!opt.group_patterns.empty() && opt.group_patterns != g.patterns)
    throw_usage("[optimizer] group_patterns: ", program, " sets the parameter groups itself from ", g.from,
                "; leave [optimizer] group_* unset");
  opt.group_patterns = g.patterns;
  opt.group_lr = g.lr;
  opt.group_weight_decay = g.weight_decay;
}
}  // namespace

void configure_run(TrainerConfigs& cfg, const Pipeline& pipeline) {
  cfg.data.pairwise = pipeline.batch_kind() == BatchKind::Pairwise;
  const PipelineSettings settings = pipeline_settings(cfg);
  pipeline.check(settings);
  apply_param_groups("train-" + pipeline.name(), pipeline.param_groups(settings), cfg.optimizer);
}

}  // namespace wmtp
