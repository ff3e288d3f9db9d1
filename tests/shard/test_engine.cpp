// The sharding engine on toy units (mpirun -np 1..4): gradients equal a single-process LibTorch
// computation on the whole batch for every strategy, with/without prefetch, activation checkpointing,
// micro-batch accumulation and no_sync; full_shard really releases gathered memory after forward and
// re-gathers it for backward (at np 1: computes on the rank's own buffers, gathering nothing);
// parameters load and come back as pieces of owned ranges; hybrid refuses a backward once the
// replicas have summed the step's gradients.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include "model/local_params.h"
#include "rel_diff.h"
#include "shard/sharded_model.h"
#include "shard_test_util.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 11;
constexpr int64_t kRows = 13;

ShardingConfig sharding(const std::string& strategy, bool prefetch, bool no_sync = false,
                        const std::string& dtype = "fp32") {
  ShardingConfig c;
  test::set_config(c, "strategy=" + strategy);
  c.prefetch = prefetch;
  c.no_sync = no_sync;
  test::set_config(c, "param_dtype=" + dtype);
  return c;
}

// Reference: the whole batch in one process, plain tensors.
std::unordered_map<std::string, at::Tensor> reference_grads(const ToyNet& net, std::optional<at::ScalarType> dtype) {
  LocalParams local(net.specs(), net.init(kSeed), dtype);
  net.loss(local, toy_rows(kSeed + 1, kRows, 0, kRows), kRows, false).backward();
  std::unordered_map<std::string, at::Tensor> g;
  for (const ParamSpec& s : net.specs())
    if (s.trainable) g[s.fqn] = local.param(s.fqn).grad();
  return g;
}

// This rank's rows in `micro` micro-batches, each normalized by the global row count.
void engine_backward(const ToyNet& net, ShardedModel& engine, int micro, bool checkpoint) {
  int64_t begin, n;
  rank_rows(kRows, world_comm().rank(), world_comm().size(), &begin, &n);
  at::Tensor x = toy_rows(kSeed + 1, kRows, begin, n);
  for (int m = 0; m < micro; ++m) {
    int64_t b = n * m / micro, e = n * (m + 1) / micro;
    net.loss(engine, x.narrow(0, b, e - b), kRows, checkpoint).backward();
  }
  engine.reduce_gradients();
}

TEST(ShardEngine, GradientsEqualSingleProcessForEveryStrategyAndOption) {
  ToyNet net;
  const auto expected = reference_grads(net, std::nullopt);
  const std::unique_ptr<ShardGroups> groups = shard_groups(mpi().world(), hybrid_test_group_size(world_comm().size()));
  for (std::string strategy : {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_grad_op"})
    for (bool prefetch : {false, true})
      for (bool checkpoint : {false, true})
        for (int micro : {1, 2})
          for (bool no_sync : {false, true}) {
            if (no_sync && micro == 1) continue;
            ShardedModel engine(net.specs(), world_comm(), sharding(strategy, prefetch, no_sync),
                                c10::Device(c10::kCPU), groups.get());
            engine.load_full(net.init(kSeed));
            for (int pass = 0; pass < 2; ++pass) {  // the second pass runs with learned prefetch order
              engine.zero_grad();
              engine_backward(net, engine, micro, checkpoint);
            }
            std::string worst;
            double d = rel_diff(engine.full_grads(), expected, &worst);
            EXPECT_LE(d, 1e-5) << strategy << " prefetch=" << prefetch << " checkpoint=" << checkpoint
                               << " micro=" << micro << " no_sync=" << no_sync << ": " << worst;
            EXPECT_EQ(engine.memory_stats().gathered_bytes, 0) << strategy << " left gathered memory";
          }
}

TEST(ShardEngine, Bf16GradientsMatchSingProcessBf16) {
  ToyNet net;
  const auto expected = reference_grads(net, at::kBFloat16);
  for (std::string strategy : {"full_shard", "no_shard"}) {
    ShardedModel engine(net.specs(), world_comm(), sharding(strategy, true, false, "bf16"));
    engine.load_full(net.init(kSeed));
    engine_backward(net, engine, 1, false);
    std::string worst;
    EXPECT_LE(rel_diff(engine.full_grads(), expected, &worst), 2e-2) << strategy << ": " << worst;
  }
}

TEST(ShardEngine, FullShardReleasesAfterForwardAndRegathersForBackward) {
  ToyNet net;
  ShardedModel engine(net.specs(), world_comm(), sharding("full_shard", false));
  engine.load_full(net.init(kSeed));
  at::Tensor x = toy_rows(kSeed + 1, kRows, 0, 4).requires_grad_(true);

  // One unit by hand: the views stay with us, their memory does not.
  UnitParams p = engine.begin_unit("u0");
  if (one_rank()) {  // u0's tensors are views of the rank's own fp32 buffer, which nothing releases
    EXPECT_TRUE(p.at("u0.W").storage().is_alias_of(engine.trainable_shards()[0].master.storage()));
    at::Tensor y = at::linear(x, p.at("u0.W"), p.at("u0.b")).tanh() * p.at("u0.s");
    engine.end_unit("u0", y);
    EXPECT_GT(p.at("u0.W").storage().nbytes(), 0u);
    y.sum().backward();
    return expect_local_compute(engine, "one rank");
  }
  ASSERT_GT(p.at("u0.W").storage().nbytes(), 0u);
  EXPECT_EQ(engine.memory_stats().gathered_units, 1);
  at::Tensor y = at::linear(x, p.at("u0.W"), p.at("u0.b")).tanh() * p.at("u0.s");
  engine.end_unit("u0", y);
  EXPECT_EQ(p.at("u0.W").storage().nbytes(), 0u) << "full_shard must release the gathered buffer after forward";
  EXPECT_EQ(p.at("u0.s").storage().nbytes(), 0u) << "frozen buffers too";
  EXPECT_EQ(engine.memory_stats().gathered_bytes, 0);
  y.sum().backward();  // tanh saved its output, linear saved W: both need the re-gathered values
  EXPECT_GT(p.at("u0.W").storage().nbytes(), 0u) << "re-gathered before backward";
  engine.reduce_gradients();
  // d/dx of sum(tanh(xW^T+b)*s) computed from the original values
  auto init = net.init(kSeed);
  at::Tensor xr = x.detach().clone().requires_grad_(true);
  (at::linear(xr, init["u0.W"], init["u0.b"]).tanh() * init["u0.s"]).sum().backward();
  EXPECT_LE(rel_diff(x.grad(), xr.grad()), 1e-6);
  p.clear();
  EXPECT_EQ(engine.memory_stats().gathered_bytes, 0);

  // The whole net: nothing stays gathered after forward; never more than two units at once.
  engine.zero_grad();
  engine.reset_peak_memory();
  at::Tensor loss = net.loss(engine, toy_rows(kSeed + 1, kRows, 0, kRows), kRows, false);
  EXPECT_EQ(engine.memory_stats().gathered_bytes, 0);
  loss.backward();
  MemoryStats m = engine.memory_stats();
  EXPECT_EQ(m.gathered_bytes, 0);
  EXPECT_GE(m.peak_gathered_units, 1);
  EXPECT_LE(m.peak_gathered_units, 2);
}

TEST(ShardEngine, ShardGradOpKeepsParametersFromForwardToBackward) {
  ToyNet net;
  ShardedModel engine(net.specs(), world_comm(), sharding("shard_grad_op", false));
  engine.load_full(net.init(kSeed));
  at::Tensor loss = net.loss(engine, toy_rows(kSeed + 1, kRows, 0, 5), kRows, false);
  if (one_rank()) return expect_local_compute(engine, "one rank");
  EXPECT_EQ(engine.memory_stats().gathered_units, net.units);
  loss.backward();
  loss = at::Tensor();
  EXPECT_EQ(engine.memory_stats().gathered_bytes, 0) << "released with the graph";
}

TEST(ShardEngine, ForwardWithoutGradFreesAtOnce) {
  ToyNet net;
  for (std::string strategy : {"full_shard", "shard_grad_op"}) {
    ShardedModel engine(net.specs(), world_comm(), sharding(strategy, false));
    engine.load_full(net.init(kSeed));
    c10::NoGradGuard no_grad;
    net.forward(engine, toy_rows(kSeed + 1, kRows, 0, 5), false);
    EXPECT_EQ(engine.memory_stats().gathered_bytes, 0) << strategy;
    if (one_rank()) expect_local_compute(engine, strategy);
    else
      EXPECT_EQ(engine.memory_stats().peak_gathered_units, 1) << strategy;
  }
}

TEST(ShardEngine, PrefetchGathersTheNextUnitEarlyAndStaysBounded) {
  ToyNet net;
  ShardedModel engine(net.specs(), world_comm(), sharding("full_shard", true));
  engine.load_full(net.init(kSeed));
  for (int pass = 0; pass < 2; ++pass) {
    engine.zero_grad();
    net.loss(engine, toy_rows(kSeed + 1, kRows, 0, 6), kRows, false).backward();
  }
  if (one_rank()) return expect_local_compute(engine, "one rank");
  EXPECT_LE(engine.memory_stats().peak_gathered_units, 3);
  EXPECT_EQ(engine.memory_stats().gathered_bytes, 0);
  // The order u0, u1, u2 is learned: beginning u0 starts gathering u1.
  UnitParams p = engine.begin_unit("u0");
  EXPECT_EQ(engine.memory_stats().gathered_units, 2);
  c10::NoGradGuard no_grad;
  engine.end_unit("u0", at::Tensor());
  p.clear();
  engine.invalidate_gathered();
  EXPECT_EQ(engine.memory_stats().gathered_bytes, 0) << "a dropped prefetch frees its buffer";
}

TEST(ShardEngine, PiecesAreTheOwnedRangesAndLoadBack) {
  ToyNet net;
  const auto init = net.init(kSeed), other = net.init(kSeed + 7);
  for (std::string strategy : {"full_shard", "no_shard"}) {
    ShardedModel engine(net.specs(), world_comm(), sharding(strategy, false, false, "bf16"));
    engine.load_full(init);
    int64_t mine = 0;
    for (const TensorPiece& p : engine.trainable_pieces()) {
      at::Tensor want = init.at(p.name).reshape({-1}).narrow(0, p.offset, p.data.numel());
      EXPECT_TRUE(at::equal(p.data, want)) << p.name;
      EXPECT_EQ(p.data.scalar_type(), at::kFloat);
      mine += p.data.numel();
    }
    for (const TensorPiece& p : engine.frozen_pieces()) {
      at::Tensor want =
          init.at(p.name).reshape({-1}).narrow(0, p.offset, p.data.numel()).to(at::kBFloat16).to(at::kFloat);
      EXPECT_TRUE(at::equal(p.data, want)) << p.name;
      mine += p.data.numel();
    }
    int64_t total = 0;
    for (const ParamSpec& s : net.specs()) total += s.numel();
    EXPECT_EQ(world_comm().all_reduce_scalar(mine, ReduceOp::Sum), total) << "each element owned once";

    // Load other values as pieces split at arbitrary points (not the owned ranges).
    std::vector<TensorPiece> pieces;
    for (const auto& [fqn, t] : other) {
      at::Tensor flat = t.reshape({-1});
      int64_t cut = flat.numel() / 3;
      pieces.push_back({fqn, 0, flat.narrow(0, 0, cut)});
      pieces.push_back({fqn, cut, flat.narrow(0, cut, flat.numel() - cut)});
    }
    engine.load_pieces(pieces);
    auto full = engine.full_params();
    for (const ParamSpec& s : net.specs()) {
      at::Tensor want = s.trainable ? other.at(s.fqn) : other.at(s.fqn).to(at::kBFloat16).to(at::kFloat);
      EXPECT_TRUE(at::equal(full.at(s.fqn), want)) << strategy << " " << s.fqn;
    }
    // Writing through the views changes the masters.
    for (TensorPiece& p : engine.trainable_pieces()) p.data.fill_(2.0);
    engine.sync_replicas();
    full = engine.full_params(false);
    for (const ParamSpec& s : net.specs())
      if (s.trainable) {
        EXPECT_TRUE(at::equal(full.at(s.fqn), at::full(s.shape, 2.0))) << strategy << " " << s.fqn;
      }
  }
}

// Hybrid: reduce_gradients() has summed the group shards across the replicas (and sent them to the
// other groups); a further backward would add to those sums, so the engine refuses it, and after
// zero_grad() the next step's gradients are right again.
TEST(ShardEngine, HybridRefusesABackwardAfterTheReplicasSummed) {
  ToyNet net;
  const auto expected = reference_grads(net, std::nullopt);
  const std::unique_ptr<ShardGroups> groups = shard_groups(mpi().world(), hybrid_test_group_size(world_comm().size()));
  ShardedModel engine(net.specs(), world_comm(), sharding("hybrid_shard", false), c10::Device(c10::kCPU), groups.get());
  engine.load_full(net.init(kSeed));
  engine_backward(net, engine, 1, false);
  std::string message;
  try {
    net.loss(engine, toy_rows(kSeed + 1, kRows, 0, kRows), kRows, false).backward();
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("already all-reduced across the replicas"), std::string::npos)
      << "a backward after reduce_gradients() was not refused: '" << message << "'";
  engine.zero_grad();
  engine_backward(net, engine, 1, false);
  std::string worst;
  EXPECT_LE(rel_diff(engine.full_grads(), expected, &worst), 1e-5) << "after zero_grad(): " << worst;
}

TEST(ShardEngine, RejectsMisuse) {
  ToyNet net;
  ShardedModel engine(net.specs(), world_comm(), sharding("full_shard", false));
  EXPECT_THROW(engine.begin_unit("nope"), Error);
  EXPECT_THROW(engine.end_unit("u0", at::Tensor()), Error);
  auto init = net.init(kSeed);
  init.erase("u1.b");
  EXPECT_THROW(engine.load_full(init), Error);
  EXPECT_THROW(engine.load_pieces({{"u0.W", 20, at::zeros({10})}}), Error);
  EXPECT_THROW(engine.load_pieces({{"zz", 0, at::zeros({1})}}), Error);
}

}  // namespace
}  // namespace wmtp::test
