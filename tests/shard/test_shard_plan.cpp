// ShardPlan, the memory estimate and the dry-run table, for planned world sizes 1..8 without MPI:
// every element of every parameter is owned by exactly one rank, shards are equal, padding is the
// least that makes buffers divisible, and the estimate is (16 Ψ_trainable + 2 Ψ_frozen) / N + padding.
#include <gtest/gtest.h>

#include <map>

#include "core/config.h"
#include "core/error.h"
#include "shard/memory_stats.h"
#include "shard/plan_report.h"
#include "shard/shard_plan.h"
#include "shard/sharding_config.h"

namespace wmtp {
namespace {

std::vector<ParamSpec> toy_specs() {
  return {
      {"tok_embeddings.weight", "tok_embeddings", {37, 14}, true},
      {"layers.0.attention.wq.weight", "layers.0", {14, 14}, false},
      {"layers.0.attention.wq.lora_A", "layers.0", {2, 14}, true},
      {"layers.0.attention.wq.lora_B", "layers.0", {14, 2}, true},
      {"layers.0.attention_norm.weight", "layers.0", {14}, false},
      {"layers.1.feed_forward.w1.weight", "layers.1", {37, 14}, true},
      {"norm.weight", "output", {14}, true},
      {"output.weight", "output", {37, 14}, true},
  };
}

TEST(ShardPlan, UnitsInSpecOrderWithSeparateTrainableAndFrozenBuffers) {
  ShardPlan plan(toy_specs(), 3);
  ASSERT_EQ(plan.units().size(), 4u);
  EXPECT_EQ(plan.unit(0).name, "tok_embeddings");
  EXPECT_EQ(plan.unit(1).name, "layers.0");
  EXPECT_EQ(plan.unit(3).name, "output");
  const UnitPlan& l0 = plan.unit(1);
  ASSERT_EQ(l0.trainable.params.size(), 2u);
  ASSERT_EQ(l0.frozen.params.size(), 2u);
  EXPECT_EQ(l0.trainable.numel, 56);
  EXPECT_EQ(l0.trainable.params[1].offset, 28);
  EXPECT_EQ(l0.frozen.numel, 210);
  EXPECT_EQ(l0.frozen.padded_numel, 210);  // divisible by 3 already
  EXPECT_EQ(l0.trainable.padded_numel, 57);
  EXPECT_EQ(l0.trainable.shard_numel, 19);
  EXPECT_EQ(plan.unit_index("output"), 3);
  EXPECT_EQ(plan.unit_index("nope"), -1);
}

// Hybrid groups of G ranks: a rank at place p of group k holds slices [p·R, (p+1)·R) (its group
// shard: padded / G elements) and owns slice p·R + k of them; the owned slices of all N ranks are
// every slice once, and what a rank owns lies in what it holds, at the same element.
TEST(ShardPlan, HybridGroupShardsHoldTheOwnedSlicesOfTheirReplicas) {
  const auto specs = toy_specs();
  for (auto [n, g] : std::vector<std::pair<int, int>>{{4, 2}, {6, 3}, {6, 2}, {8, 4}, {4, 1}, {4, 4}}) {
    ShardPlan plan(specs, n, g);
    const int replicas = n / g;
    ASSERT_EQ(plan.group_size(), g);
    ASSERT_EQ(plan.replicas(), replicas);
    std::vector<int> owners(static_cast<size_t>(n), 0);
    for (int w = 0; w < n; ++w) {
      const int place = w % g, group = w / g, first = place * replicas, owned = first + group;
      ++owners[static_cast<size_t>(owned)];
      for (bool trainable : {true, false}) {
        std::map<std::string, OwnedRange> held;
        for (const OwnedRange& h : plan.slice_ranges(first, replicas, trainable)) {
          const FlatLayout& l = trainable ? plan.unit(h.unit).trainable : plan.unit(h.unit).frozen;
          ASSERT_EQ(l.group_shard_numel * g, l.padded_numel);
          ASSERT_LE(h.shard_offset + h.numel, l.group_shard_numel) << h.fqn;
          held[h.fqn] = h;
        }
        for (const OwnedRange& o : plan.owned_ranges(owned, trainable)) {
          const FlatLayout& l = trainable ? plan.unit(o.unit).trainable : plan.unit(o.unit).frozen;
          ASSERT_TRUE(held.count(o.fqn)) << "n " << n << " g " << g << ": " << o.fqn;
          const OwnedRange& h = held.at(o.fqn);
          // Element o.param_offset of the parameter: in the group shard at h's offset plus the distance.
          EXPECT_EQ(h.shard_offset + (o.param_offset - h.param_offset), o.shard_offset + group * l.shard_numel)
              << o.fqn;
          EXPECT_GE(o.param_offset, h.param_offset);
          EXPECT_LE(o.param_offset + o.numel, h.param_offset + h.numel);
        }
      }
    }
    for (int c : owners) EXPECT_EQ(c, 1) << "n " << n << " g " << g << ": every slice owned once";
  }
  EXPECT_THROW(ShardPlan(specs, 6, 4), Error);
}

TEST(ShardPlan, EveryElementOwnedExactlyOnceAtAnyWorldSize) {
  const auto specs = toy_specs();
  for (int n = 1; n <= 8; ++n) {
    ShardPlan plan(specs, n);
    std::map<std::string, std::vector<int>> hits;
    for (const ParamSpec& s : specs) hits[s.fqn].assign(static_cast<size_t>(s.numel()), 0);
    for (int r = 0; r < n; ++r) {
      int64_t shard_elems_t = 0, shard_elems_f = 0;
      for (const OwnedRange& o : plan.owned_ranges(r)) {
        ASSERT_GT(o.numel, 0);
        const FlatLayout& l = o.trainable ? plan.unit(o.unit).trainable : plan.unit(o.unit).frozen;
        ASSERT_LE(o.shard_offset + o.numel, l.shard_numel) << o.fqn;
        // the shard position and the parameter position name the same flat element
        const ParamSlot* slot = nullptr;
        for (const ParamSlot& p : l.params)
          if (p.fqn == o.fqn) slot = &p;
        ASSERT_NE(slot, nullptr);
        EXPECT_EQ(r * l.shard_numel + o.shard_offset, slot->offset + o.param_offset) << o.fqn << " rank " << r;
        for (int64_t i = 0; i < o.numel; ++i) hits[o.fqn][static_cast<size_t>(o.param_offset + i)]++;
        (o.trainable ? shard_elems_t : shard_elems_f) += o.numel;
      }
      EXPECT_EQ(plan.owned_ranges(r, true).size() + plan.owned_ranges(r, false).size(), plan.owned_ranges(r).size());
    }
    for (auto& [fqn, h] : hits)
      for (int c : h) ASSERT_EQ(c, 1) << fqn << " at N=" << n;
    for (const UnitPlan& u : plan.units()) {
      for (const FlatLayout* l : {&u.trainable, &u.frozen}) {
        EXPECT_EQ(l->padded_numel % n, 0);
        EXPECT_LT(l->padding(), n);
        EXPECT_GE(l->padding(), 0);
        EXPECT_EQ(l->shard_numel * n, l->padded_numel);
      }
    }
  }
}

TEST(ShardPlan, RejectsBadInput) {
  auto specs = toy_specs();
  EXPECT_THROW(ShardPlan(specs, 0), Error);
  specs.push_back(specs[0]);
  EXPECT_THROW(ShardPlan(specs, 2), Error);
  std::vector<ParamSpec> bad = {{"a", "", {2}, true}};
  EXPECT_THROW(ShardPlan(bad, 2), Error);
  std::vector<ParamSpec> zero = {{"a", "u", {2, 0}, true}};
  EXPECT_THROW(ShardPlan(zero, 2), Error);
}

TEST(MemoryEstimate, ModelStateIsSixteenBytesPerTrainableAndTwoPerFrozenOverN) {
  const auto specs = toy_specs();
  int64_t psi_t = 0, psi_f = 0;
  for (const ParamSpec& s : specs) (s.trainable ? psi_t : psi_f) += s.numel();
  for (int n : {1, 2, 3, 4, 7}) {
    ShardPlan plan(specs, n);
    // padding computed independently of the plan: per unit and buffer, up to the next multiple of N
    std::map<std::string, std::pair<int64_t, int64_t>> per_unit;
    for (const ParamSpec& s : specs) (s.trainable ? per_unit[s.unit].first : per_unit[s.unit].second) += s.numel();
    int64_t pad_t = 0, pad_f = 0;
    for (auto& [u, c] : per_unit) {
      pad_t += (n - c.first % n) % n;
      pad_f += (n - c.second % n) % n;
    }
    ShardingConfig cfg;  // full_shard, bf16
    MemoryStats m = estimate_memory(plan, cfg);
    EXPECT_EQ(m.model_state_bytes() * n, 16 * (psi_t + pad_t) + 2 * (psi_f + pad_f)) << "N=" << n;
    EXPECT_EQ(m.master_bytes * n, 4 * (psi_t + pad_t));
    EXPECT_EQ(m.optimizer_bytes * n, 8 * (psi_t + pad_t));
    cfg.param_dtype = at::kFloat;
    EXPECT_EQ(estimate_memory(plan, cfg).frozen_bytes * n, 4 * (psi_f + pad_f));
    cfg.strategy = ShardStrategy::NoShard;
    EXPECT_EQ(estimate_memory(plan, cfg).master_bytes, 4 * (psi_t + pad_t)) << "replicas are whole";
    EXPECT_EQ(estimate_memory(plan, cfg, /*with_optimizer=*/false).optimizer_bytes, 0);
  }
}

TEST(MemoryEstimate, GatheredPeakFollowsTheStrategy) {
  ShardPlan plan(toy_specs(), 4);
  ShardingConfig cfg;
  cfg.prefetch = false;
  const int64_t biggest = plan.max_unit_gathered_numel();
  EXPECT_EQ(estimate_memory(plan, cfg).peak_gathered_bytes, 2 * 2 * biggest);
  cfg.prefetch = true;
  EXPECT_EQ(estimate_memory(plan, cfg).peak_gathered_bytes, 3 * 2 * biggest);
  cfg.strategy = ShardStrategy::ShardGradOp;
  EXPECT_EQ(estimate_memory(plan, cfg).peak_gathered_bytes,
            2 * (plan.trainable_padded_numel() + plan.frozen_padded_numel()));
}

TEST(PlanReport, PrintsEveryUnitAndTheTotals) {
  ShardPlan plan(toy_specs(), 4);
  ShardingConfig cfg;
  std::string text = describe_plan(plan, cfg);
  for (const char* u : {"tok_embeddings", "layers.0", "layers.1", "output", "total", "per rank", "world size 4"})
    EXPECT_NE(text.find(u), std::string::npos) << u << "\n" << text;
}

// The TOML's spellings map to what the engine uses, print back as read, and anything else is
// refused naming the choices in their documented order.
TEST(ShardingConfig, ChoicesMapToTheirMeaningAndBack) {
  ShardingConfig cfg;
  ConfigSet set;
  set.add("sharding", cfg);
  set.apply_overrides({"sharding.strategy=shard_grad_op", "sharding.param_dtype=fp32", "sharding.reduce_dtype=bf16",
                       "sharding.offload=optimizer"});
  EXPECT_EQ(cfg.strategy, ShardStrategy::ShardGradOp);
  EXPECT_EQ(cfg.param_dtype, at::kFloat);
  EXPECT_EQ(cfg.reduce_dtype, at::kBFloat16);
  EXPECT_EQ(cfg.offload, Offload::Optimizer);
  const std::string toml = set.to_toml();
  for (const char* line :
       {"strategy = 'shard_grad_op'", "param_dtype = 'fp32'", "reduce_dtype = 'bf16'", "offload = 'optimizer'"})
    EXPECT_NE(toml.find(line), std::string::npos) << line << "\n" << toml;
  set.apply_overrides({"sharding.strategy=no_shard", "sharding.offload=full"});
  EXPECT_EQ(cfg.strategy, ShardStrategy::NoShard);
  EXPECT_EQ(cfg.offload, Offload::Full);
  auto refused = [&](const std::string& assignment) {
    try {
      set.apply_override(assignment);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused("sharding.strategy=hybrid")
                .find("is not one of: full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_grad_op"),
            std::string::npos);
  EXPECT_NE(refused("sharding.param_dtype=fp16").find("is not one of: bf16, fp32"), std::string::npos);
  EXPECT_NE(refused("sharding.reduce_dtype=fp16").find("is not one of: fp32, bf16"), std::string::npos);
  EXPECT_EQ(cfg.reduce_dtype, at::kBFloat16) << "a refused value leaves the setting as it was";
}

}  // namespace
}  // namespace wmtp
