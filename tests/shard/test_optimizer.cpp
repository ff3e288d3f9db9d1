// ShardedAdamW (mpirun -np 1..4): three steps with parameter groups and clipping equal
// torch::optim::AdamW + clip_grad_norm_ in one process (also the host optimizer under offload); the optimizer state leaves as owned-range
// pieces and comes back at another world size (N -> 1) and another strategy, continuing identically.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/choice_names.h"
#include "core/error.h"
#include "comm/mpi_communicator.h"
#include "model/local_params.h"
#include "rel_diff.h"
#include "shard/memory_stats.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "shard_test_util.h"
#include "test_util.h"
#include "torch_reference.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 21;
constexpr int64_t kRows = 11;

OptimizerConfig optimizer_config(double max_norm) {
  OptimizerConfig c;
  c.lr = 1e-2;
  c.betas = {0.9, 0.95};
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  c.max_grad_norm = max_norm;
  c.group_patterns = {"*.b", "u1.*"};
  c.group_lr = {3e-2, 5e-3};
  c.group_weight_decay = {0.0, 0.2};
  return c;
}

at::Tensor step_rows(int step, int64_t begin, int64_t n) { return toy_rows(kSeed + 100 + step, kRows, begin, n); }

// One optimizer step of the engine: this rank's rows of the step's batch in two micro-batches.
double engine_step(const ToyNet& net, ShardedModel& engine, ShardedAdamW& opt, int step, Communicator& comm) {
  int64_t begin, n;
  rank_rows(kRows, comm.rank(), comm.size(), &begin, &n);
  opt.zero_grad();
  for (int m = 0; m < 2; ++m) {
    int64_t b = begin + n * m / 2, e = begin + n * (m + 1) / 2;
    net.loss(engine, step_rows(step, b, e - b), kRows, false).backward();
  }
  double norm = opt.clip_grad_norm();
  opt.step();
  return norm;
}

struct TorchReference {
  ToyNet net;
  LocalParams local;
  TorchAdamW opt;

  TorchReference(const ToyNet& n, const OptimizerConfig& c) : net(n), local(n.specs(), n.init(kSeed)), opt(local, c) {}
  double step(int s) {
    opt.zero_grad();
    net.loss(local, step_rows(s, 0, kRows), kRows, false).backward();
    return opt.clip_and_step();
  }
  std::unordered_map<std::string, at::Tensor> params() const {
    std::unordered_map<std::string, at::Tensor> p;
    for (const ParamSpec& s : net.specs()) p[s.fqn] = local.param(s.fqn).detach().clone();
    return p;
  }
};

TEST(ShardedAdamW, StepsEqualTorchAdamWWithGroupsAndClipping) {
  ToyNet net;
  for (double max_norm : {0.05, 0.0}) {  // clipping on every step / off
    OptimizerConfig oc = optimizer_config(max_norm);
    TorchReference ref(net, oc);
    std::vector<double> ref_norms;
    std::vector<std::unordered_map<std::string, at::Tensor>> ref_params;
    for (int s = 0; s < 3; ++s) {
      ref_norms.push_back(ref.step(s));
      ref_params.push_back(ref.params());
    }
    // (strategy, offload): the host optimizer of offload "optimizer" and "full" too.
    const std::pair<std::string, std::string> variants[] = {{"full_shard", "none"},
                                                            {"shard_grad_op", "none"},
                                                            {"no_shard", "none"},
                                                            {"full_shard", "optimizer"},
                                                            {"shard_grad_op", "full"}};
    for (const auto& [strategy_name, offload] : variants) {
      ShardingConfig sc;
      test::set_config(sc, "strategy=" + strategy_name);
      test::set_config(sc, "offload=" + offload);
      sc.param_dtype = at::kFloat;
      const std::string strategy = strategy_name + " offload " + offload;
      ShardedModel engine(net.specs(), world_comm(), sc);
      engine.load_full(net.init(kSeed));
      ShardedAdamW opt(engine, oc);
      for (int s = 0; s < 3; ++s) {
        double norm = engine_step(net, engine, opt, s, world_comm());
        EXPECT_NEAR(norm, ref_norms[s], 1e-5 * ref_norms[s]) << strategy << " step " << s;
        if (max_norm > 0) {
          EXPECT_GT(ref_norms[s], max_norm) << "the test means to clip";
        }
        std::string worst;
        EXPECT_LE(rel_diff(engine.full_params(), ref_params[s], &worst), 1e-5)
            << strategy << " step " << s << " max_norm " << max_norm << ": " << worst;
      }
      EXPECT_EQ(opt.step_count(), 3);
    }
  }
}

// Every rank's pieces summed into full tensors (each element is owned by exactly one rank).
std::unordered_map<std::string, at::Tensor> assemble(const ToyNet& net, const std::vector<TensorPiece>& pieces) {
  std::unordered_map<std::string, at::Tensor> full;
  for (const ParamSpec& s : net.specs())
    if (s.trainable) full[s.fqn] = at::zeros({s.numel()});
  for (const TensorPiece& p : pieces) full.at(p.name).narrow(0, p.offset, p.data.numel()).copy_(p.data);
  for (auto& [k, t] : full) world_comm().all_reduce(t, ReduceOp::Sum);
  return full;
}

std::vector<TensorPiece> whole(const std::unordered_map<std::string, at::Tensor>& full) {
  std::vector<TensorPiece> out;
  for (const auto& [k, t] : full) out.push_back({k, 0, t});
  return out;
}

TEST(ShardedAdamW, StateResumesFromPiecesAtAnotherWorldSizeAndStrategy) {
  ToyNet net;
  OptimizerConfig oc = optimizer_config(0.05);
  ShardingConfig sc;
  sc.param_dtype = at::kFloat;
  ShardedModel engine(net.specs(), world_comm(), sc);
  engine.load_full(net.init(kSeed));
  ShardedAdamW opt(engine, oc);
  engine_step(net, engine, opt, 0, world_comm());
  engine_step(net, engine, opt, 1, world_comm());

  // "checkpoint": the owned pieces, assembled the way a file would hold them
  auto params = assemble(net, engine.trainable_pieces());
  auto exp_avg = assemble(net, opt.state_pieces(AdamState::ExpAvg));
  auto exp_avg_sq = assemble(net, opt.state_pieces(AdamState::ExpAvgSq));
  auto frozen = net.init(kSeed);

  // Step 2 continued by the original engine, by a one-rank engine (N -> 1) and by no_shard replicas.
  engine_step(net, engine, opt, 2, world_comm());
  const auto expected = engine.full_params();

  MpiCommunicator self(MPI_COMM_SELF);
  ShardingConfig replicated = sc;
  replicated.strategy = ShardStrategy::NoShard;
  std::vector<std::pair<Communicator*, ShardingConfig>> targets = {{&self, sc}, {&world_comm(), replicated}};
  for (auto& [comm, cfg] : targets) {
    ShardedModel e2(net.specs(), *comm, cfg);
    std::vector<TensorPiece> pieces = whole(params);
    for (const ParamSpec& s : net.specs())
      if (!s.trainable) pieces.push_back({s.fqn, 0, frozen.at(s.fqn)});
    e2.load_pieces(pieces);
    ShardedAdamW o2(e2, oc);
    o2.load_state_pieces(AdamState::ExpAvg, whole(exp_avg));
    o2.load_state_pieces(AdamState::ExpAvgSq, whole(exp_avg_sq));
    o2.set_step_count(opt.step_count() - 1);
    engine_step(net, e2, o2, 2, *comm);
    std::string worst;
    EXPECT_LE(rel_diff(e2.full_params(), expected, &worst), 1e-5)
        << "world " << comm->size() << " " << choice_name(kShardStrategyNames, cfg.strategy) << ": " << worst;
    EXPECT_EQ(o2.step_count(), 3);
  }
}

// An overflow in one rank's backward (an Inf or NaN in its gradient shard): the norm is all-reduced,
// so every rank sees it non-finite; step() then refuses on every rank with the same agreed error and
// leaves parameters, moments and the step count as they were (clipping by max_norm / inf would
// otherwise scale the Inf to NaN and write NaN into the weights).
TEST(ShardedAdamW, ANonFiniteGradientIsRefusedOnEveryRank) {
  ToyNet net;
  const int rank = world_comm().rank(), world = world_comm().size();
  for (double bad : {double(INFINITY), double(NAN)})
    for (double max_norm : {0.05, 0.0}) {
      ShardingConfig sc;
      sc.param_dtype = at::kFloat;
      ShardedModel engine(net.specs(), world_comm(), sc);
      engine.load_full(net.init(kSeed));
      ShardedAdamW opt(engine, optimizer_config(max_norm));
      engine_step(net, engine, opt, 0, world_comm());  // moments are non-zero from here
      const auto params = engine.full_params();
      const auto exp_avg = assemble(net, opt.state_pieces(AdamState::ExpAvg));
      const auto exp_avg_sq = assemble(net, opt.state_pieces(AdamState::ExpAvgSq));

      opt.zero_grad();
      net.loss(engine, step_rows(1, 0, kRows), kRows, false).backward();
      if (rank == world - 1)  // the last rank alone overflows
        for (TrainableShard& sh : engine.trainable_shards())
          if (sh.owned_numel > 0) {
            sh.grad[sh.owned_begin] = bad;
            break;
          }
      const double norm = opt.clip_grad_norm();
      EXPECT_FALSE(std::isfinite(norm)) << "rank " << rank << " sees a finite norm " << norm;
      bool refused = false;
      try {
        opt.step();
      } catch (const Error& e) {
        refused = true;
        EXPECT_TRUE(e.agreed()) << "every rank must throw the same error: " << e.what();
        EXPECT_EQ(e.exit_code(), 1);
        EXPECT_NE(std::string(e.what()).find("gradient norm"), std::string::npos) << e.what();
      }
      EXPECT_TRUE(refused) << "a non-finite gradient was applied (bad " << bad << ", max_norm " << max_norm << ")";
      std::string worst;
      EXPECT_EQ(rel_diff(engine.full_params(), params, &worst), 0.0) << "parameters changed: " << worst;
      EXPECT_EQ(rel_diff(assemble(net, opt.state_pieces(AdamState::ExpAvg)), exp_avg, &worst), 0.0) << worst;
      EXPECT_EQ(rel_diff(assemble(net, opt.state_pieces(AdamState::ExpAvgSq)), exp_avg_sq, &worst), 0.0) << worst;
      EXPECT_EQ(opt.step_count(), 1);
      EXPECT_TRUE(opt.state_is_finite());
      engine_step(net, engine, opt, 1, world_comm());  // the next, finite step goes through
      EXPECT_EQ(opt.step_count(), 2);
    }
}

TEST(ShardedAdamW, StateBytesAreEightPerLocalTrainableElement) {
  ToyNet net;
  for (std::string strategy : {"full_shard", "no_shard"}) {
    ShardingConfig sc;
    test::set_config(sc, "strategy=" + strategy);
    ShardedModel engine(net.specs(), world_comm(), sc);
    ShardedAdamW opt(engine, optimizer_config(1.0));
    MemoryStats m = opt.memory_stats();
    EXPECT_EQ(m.optimizer_bytes, 2 * m.master_bytes);
    EXPECT_EQ(m.optimizer_bytes, estimate_memory(engine.plan(), sc).optimizer_bytes) << strategy;
    EXPECT_EQ(m.model_state_bytes(), estimate_memory(engine.plan(), sc).model_state_bytes()) << strategy;
  }
}

TEST(ShardedAdamW, GroupsAndValidation) {
  EXPECT_TRUE(match_fqn_pattern("*.lora_?", "layers.0.attention.wq.lora_A"));
  EXPECT_TRUE(match_fqn_pattern("value_head.*", "value_head.mlp.0.weight"));
  EXPECT_TRUE(match_fqn_pattern("*norm*", "layers.3.ffn_norm.weight"));
  EXPECT_FALSE(match_fqn_pattern("*norm", "layers.3.ffn_norm.weight"));
  EXPECT_FALSE(match_fqn_pattern("layers.1*", "layers.0.x"));
  EXPECT_TRUE(match_fqn_pattern("*", ""));

  ToyNet net;
  ShardingConfig sc;
  ShardedModel engine(net.specs(), world_comm(), sc);
  ShardedAdamW opt(engine, optimizer_config(1.0));
  ASSERT_EQ(opt.groups().size(), 3u);
  EXPECT_EQ(opt.groups()[1].numel, 5 * net.units);  // *.b
  EXPECT_EQ(opt.groups()[2].numel, 25 + 1);         // u1.W, u1.g (u1.b went to *.b)
  EXPECT_EQ(opt.groups()[0].numel, (25 + 1) * (net.units - 1));
  opt.set_lr_scale(0.5);
  EXPECT_DOUBLE_EQ(opt.groups()[1].lr, 1.5e-2);
  EXPECT_THROW(opt.set_group_lr(3, 1.0), Error);

  OptimizerConfig bad = optimizer_config(1.0);
  bad.group_lr.pop_back();
  EXPECT_THROW(ShardedAdamW(engine, bad), Error);
  bad = optimizer_config(1.0);
  bad.betas = {0.9};
  EXPECT_THROW(ShardedAdamW(engine, bad), Error);
  bad = optimizer_config(1.0);
  bad.eps = 0;
  EXPECT_THROW(ShardedAdamW(engine, bad), Error);
}

}  // namespace
}  // namespace wmtp::test
