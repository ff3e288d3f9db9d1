// Overlap without waste (mpirun -np 1..4), on the MTP model with sequential unembedding:
// - asynchronous reduce-scatter gives the same gradients and parameters, bit for bit, as blocking;
// - prefetch at depth d changes no value (bitwise) and keeps at most 2 + d units gathered;
// - the head blocks are not re-gathered between their forward and their immediate backward (learned
//   after one step), nor the last trunk block when pinned with set_reshard_after_forward;
// - the param_dtype copy of the masters is made once per optimizer step, not once per gather;
// - gather buffers are reused from the second step on;
// - at np 1 nothing is gathered at all: the rank computes on its own buffers (or their bf16 copy);
// - one small blocking collective per step (the gradient norm), which also carries the caller's figures.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "model/mtp_loss.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "shard_test_util.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 31;
constexpr int kGlobalBatch = 24;
constexpr int kMicro = 2;

struct StepsResult {
  std::unordered_map<std::string, at::Tensor> grads, params;
  ShardedModel::Counters last_step;  // counters of the last step alone
  MemoryStats memory;
};

std::vector<double> counts_of(const MtpModel& model, const std::vector<MtpBatch>& micro) {
  at::Tensor c = at::zeros({model.n_future()}, at::kLong);
  for (const MtpBatch& b : micro) c += at::tensor(count_valid_targets(b.labels, model.n_future()), at::kLong);
  world_comm().all_reduce(c, ReduceOp::Sum);
  return std::vector<double>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// `steps` AdamW steps, accumulation kMicro; grads are those of the last step (before clipping).
StepsResult run(const MtpModel& model, ShardingConfig sc, int steps, bool checkpoint = false,
                const std::string& pin = "", Communicator* comm = nullptr) {
  Communicator& c = comm ? *comm : world_comm();
  ShardedModel engine(model.param_specs(), c, sc);
  engine.init_shards(
      [&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, kSeed); });
  if (!pin.empty()) engine.set_reshard_after_forward(pin, false);
  OptimizerConfig oc;
  oc.lr = 1e-3;
  ShardedAdamW opt(engine, oc);
  MtpPassOptions so;
  so.activation_checkpointing = checkpoint;
  StepsResult r;
  for (int s = 0; s < steps; ++s) {
    auto micro = rank_micro_batches(global_batch(kSeed, s, kGlobalBatch, model.args().vocab_size), world_comm().rank(),
                                    world_comm().size(), kMicro);
    const std::vector<double> counts = counts_of(model, micro);
    engine.reset_counters();
    opt.zero_grad();
    for (const MtpBatch& b : micro) mtp_forward_backward(model, engine, b, counts, so);
    if (s + 1 == steps) {
      engine.reduce_gradients();
      r.grads = engine.full_grads();
      r.memory = engine.memory_stats();  // before the step drops the param_dtype copy
    }
    opt.clip_grad_norm();
    opt.step();
    r.last_step = engine.counters();
  }
  r.params = engine.full_params();
  return r;
}

void expect_bitwise(const std::unordered_map<std::string, at::Tensor>& got,
                    const std::unordered_map<std::string, at::Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [fqn, t] : want) EXPECT_TRUE(at::equal(got.at(fqn), t)) << what << ": " << fqn;
}

ShardingConfig config(const std::string& strategy, int depth, bool async, const std::string& dtype = "fp32") {
  ShardingConfig c;
  test::set_config(c, "strategy=" + strategy);
  test::set_config(c, "param_dtype=" + dtype);
  c.prefetch = depth > 0;
  c.prefetch_depth = depth;
  c.async_reduce = async;
  return c;
}

TEST(ShardOverlap, AsyncReduceScatterEqualsBlockingBitwise) {
  for (bool lora : {false, true}) {
    MtpModel model(tiny_mtp_args(), lora ? tiny_lora() : LoraConfig{});
    for (std::string strategy : {"full_shard", "shard_grad_op", "no_shard"})
      for (std::string dtype : {"fp32", "bf16"}) {
        const std::string what = strategy + " " + dtype + (lora ? " lora" : "");
        StepsResult blocking = run(model, config(strategy, 1, false, dtype), 2);
        StepsResult async = run(model, config(strategy, 1, true, dtype), 2);
        expect_bitwise(async.grads, blocking.grads, what + " grads");
        expect_bitwise(async.params, blocking.params, what + " params");
        EXPECT_EQ(async.last_step.reduce_scatters, blocking.last_step.reduce_scatters) << what;
      }
  }
}

TEST(ShardOverlap, PrefetchDepthChangesNoValueAndBoundsGatheredUnits) {
  MtpModel model(tiny_mtp_args(), tiny_lora());
  for (bool checkpoint : {false, true}) {
    const StepsResult none = run(model, config("full_shard", 0, true), 2, checkpoint);
    EXPECT_EQ(none.last_step.prefetched, 0);
    for (int depth : {1, 2, 3}) {
      const std::string what = "depth " + std::to_string(depth) + (checkpoint ? " +ckpt" : "");
      StepsResult r = run(model, config("full_shard", depth, true), 2, checkpoint);
      expect_bitwise(r.params, none.params, what);
      if (one_rank()) {
        EXPECT_EQ(r.last_step.prefetched, 0) << what << ": one rank has nothing to fetch";
      } else
        EXPECT_GT(r.last_step.prefetched, 0) << what;
      EXPECT_LE(r.memory.peak_gathered_units, 2 + depth) << what;
      EXPECT_EQ(r.memory.gathered_bytes, 0) << what;
    }
  }
}

TEST(ShardOverlap, HeadsAndPinnedLastTrunkBlockAreNotRegathered) {
  MtpModel model(tiny_mtp_args());
  const ModelArgs& a = model.args();
  const int64_t n_trunk = a.n_trunk_blocks(), K = a.n_future_tokens;
  const std::string last_trunk = "layers." + std::to_string(n_trunk - 1);
  for (int depth : {0, 1}) {
    ShardingConfig keep = config("full_shard", depth, true), free_all = keep;
    free_all.keep_immediate = false;
    const StepsResult before = run(model, free_all, 2);
    const StepsResult learned = run(model, keep, 2);
    const StepsResult pinned = run(model, keep, 2, false, last_trunk);
    const std::string what = "depth " + std::to_string(depth);
    if (one_rank()) {  // whole units on the rank: nothing gathered, so nothing re-gathered or kept
      for (const StepsResult* r : {&before, &learned, &pinned}) {
        EXPECT_EQ(r->last_step.gathers + r->last_step.regathers + r->last_step.kept, 0) << what;
        EXPECT_EQ(r->memory.peak_gathered_units, 0) << what;
      }
      expect_bitwise(learned.params, before.params, what + " learned");
      expect_bitwise(pinned.params, before.params, what + " pinned");
      continue;
    }
    // per micro-batch: the embedding, the trunk, K head blocks, the norm and the output unit, once each
    for (const StepsResult* r : {&before, &learned, &pinned})
      EXPECT_EQ(r->last_step.gathers, kMicro * (3 + n_trunk + K)) << what;
    // re-gathered before backward: each trunk block and each head (the embedding's backward needs no weights)
    EXPECT_EQ(before.last_step.regathers, kMicro * (n_trunk + K)) << what;
    EXPECT_EQ(learned.last_step.regathers, kMicro * n_trunk) << what;
    EXPECT_EQ(learned.last_step.kept, kMicro * K) << what;
    EXPECT_EQ(pinned.last_step.regathers, kMicro * (n_trunk - 1)) << what;
    expect_bitwise(learned.params, before.params, what + " learned");
    expect_bitwise(pinned.params, before.params, what + " pinned");
    EXPECT_LE(learned.memory.peak_gathered_units, 2 + depth) << what;
    EXPECT_LE(pinned.memory.peak_gathered_units, 3 + depth) << what;
  }
  // under activation checkpointing the heads' recompute reuses the forward's buffers
  const StepsResult ckpt = run(model, config("full_shard", 0, true), 2, true);
  if (one_rank()) {
    EXPECT_EQ(ckpt.last_step.gathers + ckpt.last_step.kept, 0);
    return;
  }
  EXPECT_EQ(ckpt.last_step.gathers, kMicro * (3 + 2 * n_trunk + K)) << "trunk recomputes gather again, heads do not";
  EXPECT_EQ(ckpt.last_step.kept, kMicro * K);
}

TEST(ShardOverlap, ParamCastOncePerStepAndBuffersReused) {
  MtpModel model(tiny_mtp_args(), tiny_lora());
  const int trainable_units = static_cast<int>(model.args().n_layer_blocks() + model.args().n_extra_heads());
  StepsResult r = run(model, config("full_shard", 1, true, "bf16"), 3);
  EXPECT_EQ(r.last_step.param_casts, trainable_units) << "one param_dtype copy per trainable unit and step";
  if (one_rank()) {
    EXPECT_EQ(r.last_step.gathers, 0) << "one rank computes on the copy itself";
  } else
    EXPECT_GT(r.last_step.gathers, r.last_step.param_casts);
  EXPECT_GT(r.memory.cast_bytes, 0);
  // buffers: every gather of the third step came from the cache (no new allocation)
  ShardingConfig sc = config("full_shard", 1, true, "bf16");
  ShardedModel engine(model.param_specs(), world_comm(), sc);
  engine.init_shards(
      [&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, kSeed); });
  MtpBatch b = make_batch(global_batch(kSeed, world_comm().rank(), 4, model.args().vocab_size));
  std::vector<double> counts = counts_of(model, {b});
  int64_t allocations = 0;
  for (int s = 0; s < 3; ++s) {
    engine.zero_grad();
    mtp_forward_backward(model, engine, b, counts, MtpPassOptions{});
    if (s == 1) allocations = engine.counters().buffer_allocations;
  }
  EXPECT_EQ(engine.counters().buffer_allocations, allocations) << "the third step allocated gather buffers";
  if (one_rank()) expect_local_compute(engine, "one rank");
  else
    EXPECT_GT(engine.counters().buffer_reuses, 0);
  MemoryStats m = engine.memory_stats();
  int64_t largest = 0;
  for (const UnitPlan& u : engine.plan().units())
    largest = std::max({largest, u.trainable.padded_numel * 2, u.frozen.padded_numel * 2});
  EXPECT_LE(m.gather_cache_bytes + m.gathered_bytes, m.peak_gathered_bytes + largest)
      << "the cache stays within the peak plus one buffer";
}

TEST(ShardOverlap, OneSmallBlockingCollectivePerStepCarryingTheCallersFigures) {
  MtpModel model(tiny_mtp_args());
  const int n = world_comm().size();
  for (std::string strategy : {"full_shard", "no_shard"}) {
    CountingCommunicator comm;
    ShardedModel engine(model.param_specs(), comm, config(strategy, 1, true));
    engine.init_shards(
        [&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, kSeed); });
    ShardedAdamW opt(engine, OptimizerConfig{});
    auto micro = rank_micro_batches(global_batch(kSeed, 0, kGlobalBatch, model.args().vocab_size), comm.rank(), n,
                                    kMicro);
    const std::vector<double> counts = counts_of(model, micro);
    opt.zero_grad();
    for (const MtpBatch& b : micro) mtp_forward_backward(model, engine, b, counts, MtpPassOptions{});
    at::Tensor figures = at::tensor({double(comm.rank() + 1), 0.5});
    const CountingCommunicator::Counts before = comm.counts;
    opt.clip_grad_norm(1.0, &figures);
    opt.step();
    EXPECT_EQ(comm.counts.small_blocking - before.small_blocking, 1) << strategy;
    EXPECT_DOUBLE_EQ(figures[0].item<double>(), n * (n + 1) / 2.0) << strategy;
    EXPECT_DOUBLE_EQ(figures[1].item<double>(), 0.5 * n) << strategy;
    if (n > 1 && strategy == "full_shard") {
      EXPECT_GT(comm.counts.reduce_scatter_async, 0);
      EXPECT_EQ(comm.counts.reduce_scatter, 0) << "reductions are posted non-blocking";
      EXPECT_GT(comm.counts.all_gather_async, 0) << "prefetches";
    }
  }
}

}  // namespace
}  // namespace wmtp::test
