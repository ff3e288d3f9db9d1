// The one normalization rule (train/train_step.h, normalizing_counts), at np 1-3: a pipeline's plan
// gives each micro-batch's counts and train_step turns them into what each forward_backward is
// normalized by — the step's counts summed over every micro-batch of every rank (one all-reduce),
// or under micro-batch normalization the micro-batch's own times accumulation x world (no
// collective). The expected values are a formula written here over every rank's counts; the plan's
// parts reach the micro-batch they were planned for.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "../shard/shard_test_util.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "test_util.h"
#include "train/run_models.h"
#include "train/train_step.h"

namespace wmtp::test {
namespace {

constexpr int kMicroBatches = 3;
constexpr int kCounts = 2;

// Rank r's count c of micro-batch m: distinct for every (r, m, c), so a sum that left one out shows.
double count_of(int rank, int m, int c) { return 1.0 + 100.0 * rank + 10.0 * m + c; }

StepPlan plan_of(int rank) {
  StepPlan plan;
  plan.counts = at::zeros({kMicroBatches, kCounts}, at::kDouble);
  for (int m = 0; m < kMicroBatches; ++m) {
    MicroBatchPlan p;
    p.weights = at::full({1}, double(m));  // which micro-batch this part was planned for
    plan.micro_batches.push_back(p);
    for (int c = 0; c < kCounts; ++c) plan.counts[m][c] = count_of(rank, m, c);
  }
  return plan;
}

// What micro-batch m of rank `rank` must be normalized by, written from the rule's definition.
std::vector<double> expected(int rank, int world, int m, LossNormalization norm) {
  std::vector<double> want(kCounts, 0.0);
  for (int c = 0; c < kCounts; ++c) {
    if (norm == LossNormalization::MicroBatch) {
      want[size_t(c)] = count_of(rank, m, c) * kMicroBatches * world;  // accumulation kMicroBatches
      continue;
    }
    for (int r = 0; r < world; ++r)
      for (int n = 0; n < kMicroBatches; ++n) want[size_t(c)] += count_of(r, n, c);
  }
  return want;
}

std::vector<double> values(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

TEST(StepCounts, GlobalSumsEveryMicroBatchOfEveryRankInOneAllReduce) {
  CountingCommunicator comm;
  const int world = comm.size();
  const BatchGeometry geo{kMicroBatches * world, 1, world, comm.rank()};
  const StepContext step_ctx{0, 1, &geo, LossNormalization::Global};
  const std::vector<at::Tensor> got = normalizing_counts(comm, plan_of(comm.rank()), step_ctx);
  EXPECT_EQ(comm.counts.all_reduce, 1);
  ASSERT_EQ(got.size(), size_t(kMicroBatches));
  for (int m = 0; m < kMicroBatches; ++m)
    EXPECT_EQ(values(got[size_t(m)]), expected(comm.rank(), world, m, LossNormalization::Global))
        << "micro-batch " << m;
}

TEST(StepCounts, MicroBatchScalesItsOwnByAccumulationTimesWorld) {
  CountingCommunicator comm;
  const int world = comm.size(), rank = comm.rank();
  const BatchGeometry geo{kMicroBatches * world * 2, 2, world, rank};  // accumulation kMicroBatches
  ASSERT_EQ(geo.accumulation_steps(), kMicroBatches);
  const StepContext step_ctx{0, 1, &geo, LossNormalization::MicroBatch};
  const std::vector<at::Tensor> got = normalizing_counts(comm, plan_of(rank), step_ctx);
  EXPECT_EQ(comm.counts.all_reduce, 0);
  ASSERT_EQ(got.size(), size_t(kMicroBatches));
  for (int m = 0; m < kMicroBatches; ++m)
    EXPECT_EQ(values(got[size_t(m)]), expected(rank, world, m, LossNormalization::MicroBatch)) << "micro-batch " << m;
}

// A pipeline that plans and then records what train_step hands each forward_backward.
class ProbePipeline final : public Pipeline {
 public:
  std::string name() const override { return "probe"; }
  void attach(const RunContext&) override {}
  StepPlan begin_step(const StepContext&, const std::vector<MicroBatch>&) override { return plan_of(rank); }
  NamedStats forward_backward(const StepContext&, const MicroBatch&, const MicroBatchPlan& plan,
                              const at::Tensor& counts) override {
    planned_for.push_back(plan.weights.item<double>());
    seen.push_back(values(counts));
    return {};
  }
  double finish_step(const StepContext&, const NamedStats&, MetricsRecord&) override { return 0; }
  NamedStats eval_batch(const MicroBatch&) override { return {}; }
  double finish_eval(const NamedStats&, MetricsRecord&) override { return 0; }

  int rank = 0;
  std::vector<double> planned_for;
  std::vector<std::vector<double>> seen;
};

TEST(StepCounts, TrainStepHandsEachMicroBatchItsPlanAndTheRulesCounts) {
  Communicator& comm = world_comm();
  ModelSpec spec;
  spec.args = tiny_mtp_args();
  ModelHandle h = build_model(spec, comm, ShardingConfig{}, /*seed=*/1);
  ShardedAdamW opt(*h.engine, OptimizerConfig{});
  const BatchGeometry geo{kMicroBatches * comm.size(), 1, comm.size(), comm.rank()};  // accumulation 3
  for (LossNormalization norm : {LossNormalization::Global, LossNormalization::MicroBatch}) {
    ProbePipeline probe;
    probe.rank = comm.rank();
    const std::vector<MicroBatch> mbs(kMicroBatches);
    const TrainStepResult r = train_step(probe, mbs, opt, comm, StepContext{0, 1, &geo, norm}, 1.0);
    EXPECT_TRUE(r.applied);
    EXPECT_EQ(probe.planned_for, (std::vector<double>{0, 1, 2}));
    ASSERT_EQ(probe.seen.size(), size_t(kMicroBatches));
    for (int m = 0; m < kMicroBatches; ++m)
      EXPECT_EQ(probe.seen[size_t(m)], expected(comm.rank(), comm.size(), m, norm)) << "micro-batch " << m;
  }
}

}  // namespace
}  // namespace wmtp::test
