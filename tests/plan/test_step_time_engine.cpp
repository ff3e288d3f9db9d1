// The time plan's schedule against the engine (mpirun -np 2 and 4): for each strategy (the hybrid
// ones in groups of 1 at np 2, of 2 at np 4: two replicas), with and without prefetch, no_sync and
// activation checkpointing, one optimizer step of the tiny MTP model
// (sequential unembedding, accumulation 2, the last trunk block pinned as the trainer pins it) posts
// exactly the collectives plan_step_time counts — all-gathers of parameters (and no_shard's
// gradient all-gathers), gradient reduce-scatters, the replicas' sums, the clip's all-reduce — counted on a
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

// Forwards to a communicator it owns and counts the collectives of each kind (a hybrid strategy's
// group and replica communicators).
class Counted final : public Communicator {
 public:
  explicit Counted(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int all_gathers = 0, reduce_scatters = 0, all_reduces = 0;
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  void all_gather(const at::Tensor& in, const at::Tensor& out) override { ++all_gathers, inner_->all_gather(in, out); }
  void reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override {
    ++reduce_scatters, inner_->reduce_scatter(in, out, op);
  }
  void all_reduce(const at::Tensor& t, ReduceOp op) override { ++all_reduces, inner_->all_reduce(t, op); }
  void broadcast(const at::Tensor& t, int root) override { inner_->broadcast(t, root); }
  void barrier() override { inner_->barrier(); }
  CommWorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) override {
    return ++all_gathers, inner_->all_gather_async(in, out);
  }
  CommWorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override {
    return ++reduce_scatters, inner_->reduce_scatter_async(in, out, op);
  }
  CommWorkPtr all_reduce_async(const at::Tensor& t, ReduceOp op) override {
    return ++all_reduces, inner_->all_reduce_async(t, op);
  }
  CommWorkPtr broadcast_async(const at::Tensor& t, int root) override { return inner_->broadcast_async(t, root); }
  void reset() { all_gathers = reduce_scatters = all_reduces = 0; }

 private:
  std::unique_ptr<Communicator> inner_;
};

struct Case {
  std::string strategy;
  int depth;
  bool no_sync, checkpoint;
};

// Collectives of the second step as the engine posted them: on the world's communicator, and for a
// hybrid strategy on its group's and its replicas'.
struct Posted {
  CountingCommunicator::Counts world;
  int group_all_gathers = 0, group_reduce_scatters = 0, replica_all_reduces = 0, replica_others = 0;
};

Posted engine_step(const MtpModel& model, const ShardingConfig& sc, bool checkpoint) {
  CountingCommunicator comm;
  std::unique_ptr<ShardGroups> groups;
  Counted *group = nullptr, *replica = nullptr;
  if (is_hybrid(sc.strategy)) {
    groups = shard_groups(mpi().world(), hybrid_test_group_size(world_comm().size()));
    groups->group = std::make_unique<Counted>(std::move(groups->group));
    groups->replica = std::make_unique<Counted>(std::move(groups->replica));
    group = static_cast<Counted*>(groups->group.get()), replica = static_cast<Counted*>(groups->replica.get());
  }
  ShardedModel engine(model.param_specs(), comm, sc, c10::Device(c10::kCPU), groups.get());
  engine.init_shards(
      [&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, kSeed); });
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
    if (group) group->reset(), replica->reset();
    opt.zero_grad();
    for (const MtpBatch& b : micro) mtp_forward_backward(model, engine, b, counts, so);
    opt.clip_grad_norm();
    opt.step();
  }
  Posted p;
  p.world = comm.counts;
  if (group) {
    p.group_all_gathers = group->all_gathers, p.group_reduce_scatters = group->reduce_scatters;
    p.replica_all_reduces = replica->all_reduces;
    p.replica_others = replica->all_gathers + replica->reduce_scatters + group->all_reduces;
  }
  return p;
}

std::map<std::string, int64_t> planned(const MtpModel& model, const ShardingConfig& sc, bool checkpoint) {
  StepTimeInput in;
  in.trained.args = model.args();
  in.sharding = sc;
  in.world_size = world_comm().size();
  in.ranks_per_node = in.world_size;
  if (is_hybrid(sc.strategy)) {  // groups of S on nodes of S ranks: gathers inside, replicas across
    in.shard_group = hybrid_test_group_size(in.world_size);
    in.ranks_per_node = in.shard_group;
    in.machine.inter = LinkProfile{1, 1, 1, 1};
    in.machine.span = LinkProfile{1, 1, 1, 1};
  }
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
  for (const Case& c :
       {Case{"full_shard", 1, false, false}, Case{"full_shard", 0, false, false}, Case{"full_shard", 2, false, false},
        Case{"full_shard", 1, false, true}, Case{"full_shard", 1, true, false}, Case{"shard_grad_op", 1, false, false},
        Case{"shard_grad_op", 1, false, true}, Case{"no_shard", 1, false, false}, Case{"no_shard", 1, true, false},
        Case{"hybrid_shard", 1, false, false}, Case{"hybrid_shard", 1, true, false},
        Case{"hybrid_shard_grad_op", 1, false, false}}) {
    ShardingConfig sc;
    set_config(sc, "strategy=" + c.strategy);
    sc.param_dtype = at::kFloat;
    sc.prefetch_depth = c.depth;
    sc.no_sync = c.no_sync;
    const std::string what = c.strategy + " depth " + std::to_string(c.depth) + (c.no_sync ? " no_sync" : "") +
                             (c.checkpoint ? " checkpointing" : "");
    const Posted got = engine_step(model, sc, c.checkpoint);
    std::map<std::string, int64_t> want = planned(model, sc, c.checkpoint);
    const CountingCommunicator::Counts& w = got.world;
    EXPECT_EQ(w.all_gather_async + w.all_gather + got.group_all_gathers,
              want["all-gather (params)"] + want["all-gather (no_shard grads)"])
        << what;
    EXPECT_EQ(w.reduce_scatter_async + w.reduce_scatter + got.group_reduce_scatters, want["reduce-scatter (grads)"])
        << what;
    EXPECT_EQ(w.all_reduce + w.all_reduce_async, want["all-reduce (grad norm)"]) << what;
    EXPECT_EQ(got.replica_all_reduces, want["all-reduce (replicas)"]) << what;
    EXPECT_EQ(got.replica_others, want["reduce-scatter (replicas)"] + want["all-gather (replicas)"]) << what;
    if (is_hybrid(sc.strategy)) EXPECT_GT(want["all-reduce (replicas)"], 0) << what;
    else
      EXPECT_GT(want["reduce-scatter (grads)"], 0) << what;
  }
}

}  // namespace
}  // namespace wmtp::test
