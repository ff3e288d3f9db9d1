// Memory of the sharding engine on the MTP model (mpirun -np 1..4): the engine-reported model state
// per rank is (16 Ψ_trainable + 2 Ψ_frozen) / N plus padding; full_shard without checkpointing keeps
// at most two units gathered at any moment (three with prefetch), measured by the engine's own
// accounting of gathered storage (at np 1: none, it computes on its own buffers); a frozen model (e.g. a reference model) costs 2 bytes per
// parameter over N and computes the same logits as the single-process model.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <map>

#include "model/local_params.h"
#include "model/mtp_loss.h"
#include "rel_diff.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "shard_test_util.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 9;

// 16 (Ψ_t + pad_t) + es (Ψ_f + pad_f), padding computed from the specs alone.
int64_t expected_model_state_times_n(const std::vector<ParamSpec>& specs, int64_t n, int64_t frozen_bytes) {
  std::map<std::string, std::pair<int64_t, int64_t>> per_unit;
  for (const ParamSpec& s : specs) (s.trainable ? per_unit[s.unit].first : per_unit[s.unit].second) += s.numel();
  int64_t total = 0;
  for (auto& [u, c] : per_unit) {
    total += 16 * (c.first + (n - c.first % n) % n);
    total += frozen_bytes * (c.second + (n - c.second % n) % n);
  }
  return total;
}

TEST(ShardMemory, ModelStateIsSixteenPerTrainableAndTwoPerFrozenOverN) {
  const int64_t n = world_comm().size();
  for (bool lora : {false, true}) {
    MtpModel model(tiny_mtp_args(), lora ? tiny_lora() : LoraConfig{});
    ShardingConfig sc;  // full_shard, bf16
    ShardedModel engine(model.param_specs(), world_comm(), sc);
    ShardedAdamW opt(engine, OptimizerConfig{});
    MemoryStats m = opt.memory_stats();
    EXPECT_EQ(m.model_state_bytes() * n, expected_model_state_times_n(model.param_specs(), n, 2)) << "lora " << lora;
    EXPECT_EQ(m.model_state_bytes(), estimate_memory(engine.plan(), sc).model_state_bytes());
    int64_t psi_t = 0;
    for (const ParamSpec& s : model.param_specs()) psi_t += s.trainable ? s.numel() : 0;
    EXPECT_GE(m.master_bytes * n, 4 * psi_t);
    EXPECT_LT(m.master_bytes * n, 4 * (psi_t + static_cast<int64_t>(engine.plan().units().size()) * n));
  }
}

MtpBatch one_batch(const MtpModel& model) {
  return make_batch(global_batch(kSeed, world_comm().rank(), 6, model.args().vocab_size));
}

std::vector<double> global_counts(const MtpModel& model, const MtpBatch& b) {
  at::Tensor c = at::tensor(count_valid_targets(b.labels, model.n_future()), at::kLong);
  world_comm().all_reduce(c, ReduceOp::Sum);
  return std::vector<double>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

TEST(ShardMemory, FullShardKeepsAtMostTwoUnitsGatheredThreeWithPrefetch) {
  for (bool lora : {false, true})
    for (bool prefetch : {false, true}) {
      MtpModel model(tiny_mtp_args(), lora ? tiny_lora() : LoraConfig{});
      ShardingConfig sc;
      sc.prefetch = prefetch;
      ShardedModel engine(model.param_specs(), world_comm(), sc);
      engine.load_full(model.init_params(kSeed));
      MtpBatch b = one_batch(model);
      MtpPassOptions so;  // sequential unembedding, no checkpointing
      for (int step = 0; step < 3; ++step) {
        engine.zero_grad();
        mtp_forward_backward(model, engine, b, global_counts(model, b), so);
      }
      MemoryStats m = engine.memory_stats();
      if (one_rank()) {
        expect_local_compute(engine, "one rank");
        continue;
      }
      const int bound = prefetch ? 3 : 2;
      EXPECT_LE(m.peak_gathered_units, bound) << "lora " << lora << " prefetch " << prefetch;
      EXPECT_GE(m.peak_gathered_units, prefetch ? 2 : 1);
      EXPECT_LE(m.peak_gathered_bytes, bound * 2 * engine.plan().max_unit_gathered_numel());
      EXPECT_LE(m.peak_gathered_bytes, estimate_memory(engine.plan(), sc).peak_gathered_bytes);
      EXPECT_EQ(m.gathered_bytes, 0);
    }
}

TEST(ShardMemory, ShardGradOpHoldsEveryUnitUntilBackward) {
  MtpModel model(tiny_mtp_args());
  ShardingConfig sc;
  sc.strategy = ShardStrategy::ShardGradOp;
  ShardedModel engine(model.param_specs(), world_comm(), sc);
  engine.load_full(model.init_params(kSeed));
  MtpBatch b = one_batch(model);
  mtp_forward_backward(model, engine, b, global_counts(model, b), MtpPassOptions{});
  MemoryStats m = engine.memory_stats();
  EXPECT_EQ(m.gathered_bytes, 0);
  if (one_rank()) return expect_local_compute(engine, "one rank");
  // the trunk and the output unit are alive together before the final backward
  EXPECT_GE(m.peak_gathered_units, static_cast<int>(model.args().n_trunk_blocks()) + 1);
}

TEST(ShardMemory, FrozenModelCostsTwoBytesPerParameterAndComputesTheSameLogits) {
  const int64_t n = world_comm().size();
  MtpModel model(tiny_mtp_args(), LoraConfig{}, ValueHeadConfig{}, /*freeze_base=*/true);
  for (std::string dtype : {"bf16", "fp32"}) {
    ShardingConfig sc;
    test::set_config(sc, "param_dtype=" + dtype);
    ShardedModel engine(model.param_specs(), world_comm(), sc);
    engine.load_full(model.init_params(kSeed));
    MemoryStats m = engine.memory_stats();
    const int64_t es = dtype == "bf16" ? 2 : 4;
    EXPECT_EQ(m.model_state_bytes() * n, expected_model_state_times_n(model.param_specs(), n, es));
    EXPECT_EQ(m.master_bytes + m.grad_bytes, 0);
    if (dtype != "fp32") continue;
    LocalParams local(model.param_specs(), model.init_params(kSeed));
    MtpBatch b = one_batch(model);
    c10::NoGradGuard no_grad;
    at::Tensor want = model.forward_logits(local, b.tokens, ForwardOptions{});
    at::Tensor got = model.forward_logits(engine, b.tokens, ForwardOptions{});
    EXPECT_LE(rel_diff(got, want), 1e-6);
    EXPECT_EQ(engine.memory_stats().gathered_bytes, 0);
  }
}

}  // namespace
}  // namespace wmtp::test
