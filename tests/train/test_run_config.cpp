// What a pipeline sees of the run's configuration and what it declares into it (train/run_config.h):
// a copy of the sections it may read, its batch kind and parameter groups written by configure_run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "train/run_config.h"

namespace wmtp {
namespace {

// A pipeline with no step arithmetic: the configuration hooks are all this file exercises.
class StubPipeline : public Pipeline {
 public:
  std::string name() const override { return "plain"; }
  void attach(const RunContext&) override {}
  StepPlan begin_step(const StepContext&, const std::vector<MicroBatch>&) override { return {}; }
  NamedStats forward_backward(const StepContext&, const MicroBatch&, const MicroBatchPlan&,
                              const at::Tensor&) override {
    return {};
  }
  double finish_step(const StepContext&, const NamedStats&, MetricsRecord&) override { return 0; }
  NamedStats eval_batch(const MicroBatch&) override { return {}; }
  double finish_eval(const NamedStats&, MetricsRecord&) override { return 0; }
};

// One that records what check() saw and declares pairwise batches and two parameter groups.
class DeclaringPipeline final : public StubPipeline {
 public:
  std::string name() const override { return "fake"; }
  BatchKind batch_kind() const override { return BatchKind::Pairwise; }
  void check(const PipelineSettings& s) const override { seen = s, ++checks; }
  ParamGroups param_groups(const PipelineSettings& s) const override {
    ParamGroups g;
    g.patterns = {"value_head.*", s.lora.enabled ? "*.lora_*" : "*"};
    g.lr = {1e-3, 2e-4};
    g.weight_decay = {0.1, 0.0};
    g.from = "[fake] head_lr";
    return g;
  }

  mutable PipelineSettings seen;
  mutable int checks = 0;
};

TrainerConfigs some_configs() {
  TrainerConfigs cfg;
  cfg.model.dim = 48;
  cfg.model.activation_checkpointing = true;
  cfg.lora.enabled = true;
  cfg.lora.rank = 4;
  cfg.training.init_weights = "backbone.h5";
  cfg.data.train = "train.h5";
  cfg.lr_schedule.warmup_ratio = 0.25;
  return cfg;
}

TEST(RunConfig, PipelineSettingsCopyTheSectionsAPipelineReads) {
  const TrainerConfigs cfg = some_configs();
  const PipelineSettings s = pipeline_settings(cfg);
  EXPECT_EQ(s.model.dim, 48);
  EXPECT_TRUE(s.model.activation_checkpointing);
  EXPECT_TRUE(s.lora.enabled);
  EXPECT_EQ(s.lora.rank, 4);
  EXPECT_EQ(s.init_weights, "backbone.h5");
  EXPECT_EQ(s.train_data, "train.h5");
  EXPECT_EQ(s.lr_schedule.warmup_ratio, 0.25);
}

TEST(RunConfig, ConfigureRunWritesWhatThePipelineDeclares) {
  TrainerConfigs cfg = some_configs();
  DeclaringPipeline p;
  configure_run(cfg, p);
  EXPECT_EQ(p.checks, 1);
  EXPECT_EQ(p.seen.init_weights, "backbone.h5");
  EXPECT_TRUE(cfg.data.pairwise);
  EXPECT_EQ(cfg.optimizer.group_patterns, (std::vector<std::string>{"value_head.*", "*.lora_*"}));
  EXPECT_EQ(cfg.optimizer.group_lr, (std::vector<double>{1e-3, 2e-4}));
  EXPECT_EQ(cfg.optimizer.group_weight_decay, (std::vector<double>{0.1, 0.0}));
  // A resolved config read back holds the same groups: accepted as they are.
  EXPECT_NO_THROW(configure_run(cfg, p));
}

TEST(RunConfig, UsersOwnGroupsAreRefusedNotSilentlyReplaced) {
  TrainerConfigs cfg = some_configs();
  cfg.optimizer.group_patterns = {"*norm*"};
  cfg.optimizer.group_lr = {1e-3};
  cfg.optimizer.group_weight_decay = {0.0};
  DeclaringPipeline p;
  try {
    configure_run(cfg, p);
    FAIL() << "the config's own groups were replaced";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    const std::string what = e.what();
    EXPECT_NE(what.find("[optimizer] group_patterns: train-fake sets the parameter groups itself from [fake] head_lr"),
              std::string::npos)
        << what;
  }
  EXPECT_EQ(cfg.optimizer.group_patterns, std::vector<std::string>{"*norm*"});
}

TEST(RunConfig, APipelineDeclaringNothingLeavesTheConfigAlone) {
  TrainerConfigs cfg = some_configs();
  cfg.optimizer.group_patterns = {"*norm*"};
  cfg.optimizer.group_lr = {1e-3};
  cfg.optimizer.group_weight_decay = {0.0};
  StubPipeline p;
  configure_run(cfg, p);
  EXPECT_FALSE(cfg.data.pairwise);
  EXPECT_EQ(cfg.optimizer.group_patterns, std::vector<std::string>{"*norm*"});
}

}  // namespace
}  // namespace wmtp
