// The time plan's schedule against the engine (mpirun -np 2 and 4): for each strategy, with and
// without prefetch, no_sync and activation checkpointing, one optimizer step of the tiny MTP model
// (sequential unembedding, accumulation 2, the last trunk block pinned as the trainer pins it) posts
// exactly the collectives plan_step_time counts — all-gathers of parameters (and no_shard's
// gradient all-gathers), gradient reduce-scatters, the clip's all-reduce — counted on a
// communicator that forwards to the world's. The step measured is the second: the engine learns
// which units to keep gathered during the first.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "model/mtp_loss.h"
#include "plan/step_time.h"
#include "../shard/shard_test_util.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 7;
constexpr int kAccumulation = 2;

struct Case {
  std::string strategy;
  int depth;
  bool no_sync, checkpoint;
};

// Collectives of the second step as the engine posted them.
CountingCommunicator::Counts engine_step(const MtpModel& model, const ShardingConfig& sc, bool checkpoint) {
  CountingCommunicator comm;
  ShardedModel engine(model.param_specs(), comm, sc);
  engine.init_shards([&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, kSeed); });
  engine.set_reshard_after_forward("layers." + std::to_string(model.args().n_trunk_blocks() - 1), false);
  OptimizerConfig oc;
  ShardedAdamW opt(engine, oc);
  MtpPassOptions so;
  so.activation_checkpointing = checkpoint;
  const int world = world_comm().size();
  for (int s = 0; s < 2; ++s) {
    auto micro = rank_micro_batches(global_batch(kSeed, s, 2 * kAccumulation * world, model.args().vocab_size),
                                    world_comm().rank(), world, kAccumulation);
    EXPECT_EQ(int(micro.size()), kAccumulation);
    const std::vector<double> counts(model.n_future(), 1.0);
    comm.counts = {};
    opt.zero_grad();
    for (const MtpBatch& b : micro) mtp_forward_backward(model, engine, b, counts, so);
    opt.clip_grad_norm();
    opt.step();
  }
  return comm.counts;
}

std::map<std::string, int64_t> planned(const MtpModel& model, const ShardingConfig& sc, bool checkpoint) {
  StepTimeInput in;
  in.trained.args = model.args();
  in.sharding = sc;
  in.world_size = world_comm().size();
  in.ranks_per_node = in.world_size;
  in.accumulation = kAccumulation;
  in.micro_batch = 2;
  in.seq = 12;
  in.checkpointing = checkpoint;
  in.machine.machine.name = "test";
  in.machine.machine.ranks_per_node = in.world_size;
  in.machine.compute.matmul_tflops_fp32 = 1;
  in.machine.compute.memory_gbps = 1;
  in.machine.intra = LinkProfile{1, 1, 1, 1};
  std::map<std::string, int64_t> out;
  for (const CollectiveTotal& c : plan_step_time(in).collectives) out[c.what] = c.count;
  return out;
}

TEST(StepTimeEngine, PlannedCollectivesAreThoseTheEnginePosts) {
  const MtpModel model(tiny_mtp_args(), LoraConfig{});
  // Not prefetch_depth 2 with checkpointing: there the engine also prefetches, for the recompute of a
  // head block, the next head's block, which its forward then gathers again (2 wasted gathers per
  // step here); the plan does not count those (step_time.h).
  for (const Case& c : {Case{"full_shard", 1, false, false}, Case{"full_shard", 0, false, false},
                        Case{"full_shard", 2, false, false}, Case{"full_shard", 1, false, true},
                        Case{"full_shard", 1, true, false},
                        Case{"shard_grad_op", 1, false, false}, Case{"shard_grad_op", 1, false, true},
                        Case{"no_shard", 1, false, false}, Case{"no_shard", 1, true, false}}) {
    ShardingConfig sc;
    set_config(sc, "strategy=" + c.strategy);
    sc.param_dtype = at::kFloat;
    sc.prefetch_depth = c.depth;
    sc.no_sync = c.no_sync;
    const std::string what = c.strategy + " depth " + std::to_string(c.depth) + (c.no_sync ? " no_sync" : "") +
                             (c.checkpoint ? " checkpointing" : "");
    const CountingCommunicator::Counts got = engine_step(model, sc, c.checkpoint);
    std::map<std::string, int64_t> want = planned(model, sc, c.checkpoint);
    EXPECT_EQ(got.all_gather_async + got.all_gather,
              want["all-gather (params)"] + want["all-gather (no_shard grads)"]) << what;
    EXPECT_EQ(got.reduce_scatter_async + got.reduce_scatter, want["reduce-scatter (grads)"]) << what;
    EXPECT_EQ(got.all_reduce + got.all_reduce_async, want["all-reduce (grad norm)"]) << what;
    EXPECT_GT(want["reduce-scatter (grads)"], 0) << what;
  }
}

}  // namespace
}  // namespace wmtp::test
