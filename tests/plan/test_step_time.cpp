// The time model's parts against formulas written here (one process, no timing):
// - a collective's time: the ring's steps times alpha plus nccl-tests' bus-bandwidth share of the
//   buffer over the slowest link class, for groups on one node, one rank per node, and across nodes;
// - the passes' FLOPs: 2·T per weight element forward, twice that backward for trained weights, the
//   attention's scores and values, the output projection once per head, recompute under checkpointing;
// - the schedule's limits: with no overlap, no prefetch and blocking reductions every collective is
//   exposed; with links of unbounded speed none is; with prefetch some of it hides behind compute;
// - the collectives of a step by strategy (counts and bytes), hybrid's replica reduction, the bytes
//   a rank sends by link, the optimizer's bytes, tokens per step; orderings a slower network must
//   respect;
// - machine profile files: round trip, refusals naming the key, the shipped H100 profile.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "plan/collective_time.h"
#include "plan/machine_profile.h"
#include "plan/pass_flops.h"
#include "plan/step_time.h"
#include "rel_diff.h"
#include "test_util.h"
#include "tiny_model.h"

namespace wmtp::test {
namespace {

MachineProfile profile(double tflops, double intra_gbps, double inter_gbps, double alpha_us, double overlap,
                       int ranks_per_node = 8) {
  MachineProfile p;
  p.machine.name = "test";
  p.machine.ranks_per_node = ranks_per_node;
  p.compute.matmul_tflops_fp32 = p.compute.matmul_tflops_bf16 = tflops;
  p.compute.memory_gbps = 100;
  p.compute.overlap = overlap;
  p.intra = LinkProfile{alpha_us, intra_gbps, intra_gbps, intra_gbps};
  p.inter = LinkProfile{alpha_us, inter_gbps, inter_gbps, inter_gbps};
  return p;
}

ModelArgs model_args() { return tiny_args(/*trunk=*/3, /*n_future=*/3); }

StepTimeInput input(const std::string& strategy, int world, int ranks_per_node, const MachineProfile& m) {
  StepTimeInput in;
  in.trained.args = model_args();
  set_config(in.sharding, "strategy=" + strategy);
  in.sharding.param_dtype = at::kFloat;
  in.world_size = world;
  in.ranks_per_node = ranks_per_node;
  in.micro_batch = 2;
  in.accumulation = 3;
  in.seq = 32;
  in.machine = m;
  return in;
}

std::map<std::string, CollectiveTotal> by_kind(const StepTimePlan& p) {
  std::map<std::string, CollectiveTotal> out;
  for (const CollectiveTotal& c : p.collectives) out[c.what] = c;
  return out;
}

TEST(CollectiveTime, RingFormulasByLinkClass) {
  const MachineProfile m = profile(1, 100, 10, 5, 1);
  const int64_t M = int64_t(1) << 26;
  // 8 ranks of one node: 7 steps over NVLink-like intra, 7/8 of the buffer over each link.
  CollectiveCost c = collective_cost(Collective::AllGather, M, GroupSpan{8, 1}, m);
  EXPECT_EQ(c.link, "intra");
  EXPECT_LT(rel_diff(c.seconds, 7 * 5e-6 + M * 7.0 / 8 / 100e9), 1e-12);
  // One rank on each of 4 nodes, all-reduce: 2 x 3 steps, 2 x 3/4 of the buffer over inter.
  c = collective_cost(Collective::AllReduce, M, GroupSpan{4, 4}, m);
  EXPECT_EQ(c.link, "inter");
  EXPECT_LT(rel_diff(c.seconds, 6 * 5e-6 + M * 1.5 / 10e9), 1e-12);
  // 2 nodes x 8 ranks, no [span] figures: 14 steps on a node, 1 across; min(intra, 8 x inter).
  MachineProfile m2 = profile(1, 100, 10, 5, 1);
  m2.inter.alpha_us = 50;
  c = collective_cost(Collective::ReduceScatter, M, GroupSpan{16, 2}, m2);
  EXPECT_EQ(c.link, "intra+inter");
  EXPECT_LT(rel_diff(c.seconds, 14 * 5e-6 + 1 * 50e-6 + M * 15.0 / 16 / 80e9), 1e-12);
  // Measured [span] figures win for a group of every rank of its nodes.
  m2.span = LinkProfile{20, 30, 30, 30};
  c = collective_cost(Collective::ReduceScatter, M, GroupSpan{16, 2}, m2);
  EXPECT_EQ(c.link, "span");
  EXPECT_LT(rel_diff(c.seconds, 15 * 20e-6 + M * 15.0 / 16 / 30e9), 1e-12);
  // ... but not for a group with another number of ranks per node.
  EXPECT_EQ(collective_cost(Collective::ReduceScatter, M, GroupSpan{8, 2}, m2).link, "intra+inter");
  EXPECT_EQ(collective_cost(Collective::AllGather, M, GroupSpan{1, 1}, m).seconds, 0);
}

TEST(CollectiveTime, GroupsOnNodes) {
  EXPECT_EQ(group_span(16, 1, 8).nodes, 2);  // a flat group of two nodes
  EXPECT_EQ(group_span(8, 1, 8).nodes, 1);   // hybrid's group = a node
  EXPECT_EQ(group_span(4, 8, 8).nodes, 4);   // its replicas: one rank per node
  EXPECT_EQ(group_span(4, 2, 8).nodes, 1);   // groups of 2: 4 replicas share a node
  EXPECT_EQ(group_span(8, 2, 8).per_node(), 4);
}

TEST(CollectiveTime, AClassTheProfileLacksIsNamed) {
  MachineProfile m = profile(1, 100, 10, 5, 1);
  m.intra = LinkProfile{};
  try {
    collective_cost(Collective::AllGather, 1 << 20, GroupSpan{4, 1}, m);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("no [intra] figures"), std::string::npos) << e.what();
  }
}

TEST(PassFlops, WeightsAttentionHeadsAndRecompute) {
  ModelSpec spec;
  spec.args = model_args();
  const ModelArgs& a = spec.args;
  PassShape shape;
  shape.rows = 2, shape.seq = 32, shape.fused_attention = true;
  const double T = 64, D = double(a.dim), V = double(a.vocab_size), K = double(a.n_future_tokens);
  const double HE = double(a.n_heads * a.head_dim()), GE = double(a.kv_heads() * a.head_dim()),
               F = double(ffn_hidden_dim(a));
  const double linear = D * HE + 2 * D * GE + HE * D + 3 * D * F;  // one block's projections
  const double attention = 2 * 2 * T * 32 * HE / 2;                // causal half, fused
  const double blocks = double(a.n_layers);                        // trunk + heads
  double fwd = 0, bwd = 0, rec = 0;
  for (const UnitWork& w : unit_work(spec, 4, 4, shape))
    fwd += w.forward_flops, bwd += w.backward_flops, rec += w.recompute_flops;
  EXPECT_LT(rel_diff(fwd, blocks * (2 * T * linear + attention) + 2 * T * V * D * K), 1e-12);
  EXPECT_LT(rel_diff(bwd, blocks * (4 * T * linear + 2 * attention) + 4 * T * V * D * K), 1e-12);
  EXPECT_EQ(rec, 0);
  shape.checkpointing = true;
  rec = 0;
  for (const UnitWork& w : unit_work(spec, 4, 4, shape)) rec += w.recompute_flops;
  EXPECT_LT(rel_diff(rec, blocks * (2 * T * linear + attention)), 1e-12);
  // LoRA: the frozen base's projections pay only their input's gradient; the adapters train.
  spec.lora.enabled = true;
  spec.lora.rank = 4;
  spec.lora.targets = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};
  shape.checkpointing = false;
  fwd = bwd = 0;
  for (const UnitWork& w : unit_work(spec, 4, 4, shape)) fwd += w.forward_flops, bwd += w.backward_flops;
  const double adapters = 4 * (D + HE) + 4 * (D + GE) * 2 + 4 * (HE + D) + 4 * (D + F) * 3;  // A [r,in] + B [out,r]
  EXPECT_LT(rel_diff(fwd, blocks * (2 * T * (linear + adapters) + attention) + 2 * T * V * D * K), 1e-12);
  EXPECT_LT(rel_diff(bwd, blocks * (2 * T * linear + 4 * T * adapters + 2 * attention) + 2 * T * V * D * K), 1e-12);
}

TEST(StepTime, ComputeOptimizerAndTokens) {
  const MachineProfile m = profile(2e-3, 10, 1, 10, 1);  // 2 GFLOP/s
  StepTimeInput in = input("full_shard", 4, 4, m);
  const StepTimePlan p = plan_step_time(in);
  PassShape shape;
  shape.rows = in.micro_batch, shape.seq = in.seq;
  double flops = 0;
  int64_t held = 0;
  for (const UnitWork& w : unit_work(in.trained, 4, 4, shape))
    flops += w.forward_flops + w.backward_flops, held += w.trainable_padded / 4;
  EXPECT_LT(rel_diff(p.compute_s, in.accumulation * flops / 2e9), 1e-12);
  EXPECT_LT(rel_diff(p.optimizer_s, double(held) * (28 + 4 + 4) / 100e9), 1e-12);  // fp32: no cast
  EXPECT_EQ(p.tokens_per_step, double(in.micro_batch * in.seq * in.accumulation * 4));
  EXPECT_LT(rel_diff(p.tokens_per_s, p.tokens_per_step / p.step_s), 1e-12);
  EXPECT_LT(rel_diff(p.step_s, p.compute_s + p.exposed_comm_s + p.optimizer_s), 1e-12);
}

TEST(StepTime, CollectivesOfEachStrategy) {
  const MachineProfile m = profile(1, 10, 1, 10, 1);
  const ModelArgs a = model_args();
  const int64_t units = a.n_layers + 3, trunk = a.n_trunk_blocks(), A = 3;
  auto p = by_kind(plan_step_time(input("full_shard", 4, 4, m)));
  EXPECT_EQ(p["all-gather (params)"].count, A * (units + trunk - 1));  // forward, re-gathers but the pinned block
  EXPECT_EQ(p["reduce-scatter (grads)"].count, A * units);
  EXPECT_EQ(p["all-gather (params)"].link, "intra");
  p = by_kind(plan_step_time(input("shard_grad_op", 4, 4, m)));
  EXPECT_EQ(p["all-gather (params)"].count, A * units);
  StepTimeInput ns = input("no_shard", 4, 4, m);
  p = by_kind(plan_step_time(ns));
  EXPECT_EQ(p.count("all-gather (params)"), 0u);
  EXPECT_EQ(p["reduce-scatter (grads)"].count, A * units);
  EXPECT_EQ(p["all-gather (no_shard grads)"].count, A * units);
  StepTimeInput ck = input("full_shard", 4, 4, m);
  ck.checkpointing = true;  // the recompute gathers what full_shard would have re-gathered
  EXPECT_EQ(by_kind(plan_step_time(ck))["all-gather (params)"].count, A * (units + trunk - 1));
  StepTimeInput nsync = input("full_shard", 4, 4, m);
  nsync.sharding.no_sync = true;
  EXPECT_EQ(by_kind(plan_step_time(nsync))["reduce-scatter (grads)"].count, units);

  // Hybrid: 4 nodes of 8, groups of 8; gathers inside the node, the replica reduction across: a
  // reduce-scatter and an all-gather of each group shard's gradient over the 4 replicas.
  StepTimeInput hy = input("hybrid_shard", 32, 8, m);
  hy.shard_group = 8;
  p = by_kind(plan_step_time(hy));
  EXPECT_EQ(p["all-gather (params)"].link, "intra");
  EXPECT_EQ(p["reduce-scatter (grads)"].group, 8);
  PassShape shape;
  int64_t held_bytes = 0;
  for (const UnitWork& w : unit_work(hy.trained, 32, 8, shape)) held_bytes += w.trainable_padded / 8 * 4;
  for (const char* k : {"reduce-scatter (replicas)", "all-gather (replicas)"}) {
    EXPECT_EQ(p[k].count, units) << k;
    EXPECT_EQ(p[k].bytes, held_bytes) << k;
    EXPECT_EQ(p[k].link, "inter") << k;
    EXPECT_EQ(p[k].group, 4) << k;
  }
  EXPECT_EQ(p.count("all-reduce (replicas)"), 0u);
  // Bytes per step a rank sends to its ring successor, by link (the trainer's perf/comm_bytes_*):
  // inside the node the group's collectives ((8-1)/8 of each buffer), across nodes the replicas'
  // (3/4), and the world's two small all-reduces (2 x 31/32) on both sides of its node boundaries.
  const StepTimePlan hp = plan_step_time(hy);
  const double small = 2.0 * 31 / 32 * double(p["all-reduce (token counts)"].bytes + p["all-reduce (grad norm)"].bytes);
  EXPECT_LT(rel_diff(hp.bytes_intra,
                     7.0 / 8 * double(p["all-gather (params)"].bytes + p["reduce-scatter (grads)"].bytes) + small),
            1e-12);
  EXPECT_LT(rel_diff(hp.bytes_inter,
                     0.75 * double(p["reduce-scatter (replicas)"].bytes + p["all-gather (replicas)"].bytes) + small),
            1e-12);
  // Two replicas (2 nodes of 8): one all-reduce per unit, 2 x 1/2 of the group shard across.
  StepTimeInput two = input("hybrid_shard", 16, 8, m);
  two.shard_group = 8;
  p = by_kind(plan_step_time(two));
  EXPECT_EQ(p["all-reduce (replicas)"].count, units);
  EXPECT_EQ(p.count("reduce-scatter (replicas)"), 0u);
  int64_t held2 = 0;
  for (const UnitWork& w : unit_work(two.trained, 16, 8, shape)) held2 += w.trainable_padded / 8 * 4;
  EXPECT_EQ(p["all-reduce (replicas)"].bytes, held2);
  EXPECT_LT(rel_diff(plan_step_time(two).bytes_inter, double(held2) + 2.0 * 15 / 16 *
                                                                          double(p["all-reduce (token counts)"].bytes +
                                                                                 p["all-reduce (grad norm)"].bytes)),
            1e-12);
  EXPECT_THROW(plan_step_time([&] {
                 StepTimeInput b = hy;
                 b.shard_group = 6;
                 return b;
               }()),
               Error);
  EXPECT_THROW(plan_step_time([&] {
                 StepTimeInput b = input("full_shard", 16, 8, m);
                 b.shard_group = 8;
                 return b;
               }()),
               Error);  // groups without a hybrid strategy
}

TEST(StepTime, ExposedCommunicationLimits) {
  // Nothing overlaps: no prefetch, blocking reductions, no progress while computing.
  StepTimeInput in = input("full_shard", 4, 4, profile(1e-3, 0.01, 0.01, 100, 0));
  in.sharding.prefetch = false;
  in.sharding.async_reduce = false;
  StepTimePlan p = plan_step_time(in);
  EXPECT_LT(rel_diff(p.exposed_comm_s, p.comm_s), 1e-9);
  // Links of unbounded speed: nothing to wait for.
  in = input("full_shard", 4, 4, profile(1e-3, 1e9, 1e9, 0, 1));
  p = plan_step_time(in);
  EXPECT_LT(p.exposed_comm_s, 1e-9 * p.step_s);
  // Prefetch and async reductions with full overlap hide part of it, never more than all of it.
  in = input("full_shard", 4, 4, profile(1e-3, 0.05, 0.05, 100, 1));
  p = plan_step_time(in);
  EXPECT_LT(p.exposed_comm_s, 0.9 * p.comm_s);
  EXPECT_GT(p.exposed_comm_s, 0);
  // The same with progress only while waiting exposes all of it again.
  in.machine.compute.overlap = 0;
  EXPECT_LT(rel_diff(plan_step_time(in).exposed_comm_s, p.comm_s), 1e-9);
}

TEST(StepTime, SlowerNetworkOrdering) {
  // 4 nodes x 2 ranks; the network 100x slower than the node's links.
  const MachineProfile fast = profile(1e-3, 1, 0.01, 10, 1, 2), slower = profile(1e-3, 1, 0.005, 10, 1, 2);
  StepTimeInput flat = input("full_shard", 8, 2, fast);
  StepTimeInput hybrid = input("hybrid_shard", 8, 2, fast);
  hybrid.shard_group = 2;
  const double flat_fast = plan_step_time(flat).step_s, hybrid_fast = plan_step_time(hybrid).step_s;
  flat.machine = hybrid.machine = slower;
  EXPECT_GE(plan_step_time(flat).step_s, flat_fast);
  EXPECT_GE(plan_step_time(hybrid).step_s, hybrid_fast);
  // Across a slow network, hybrid's once-per-step replica reduction beats full_shard's gathers.
  EXPECT_LT(plan_step_time(hybrid).step_s, plan_step_time(flat).step_s);
}

TEST(MachineProfileFile, RoundTripAndRefusals) {
  MachineProfile p = profile(12.5, 3.25, 0.125, 40, 0.25, 2);
  p.span = LinkProfile{60, 0.5, 0.25, 0.75};
  const std::string path = tmp_path("profile.toml");
  { std::ofstream(path) << machine_profile_toml(p, "# a header line\n"); }
  const MachineProfile q = load_machine_profile(path);
  EXPECT_EQ(q.machine.ranks_per_node, 2);
  EXPECT_EQ(q.compute.overlap, 0.25);
  EXPECT_EQ(q.span.reduce_scatter_busbw_gbps, 0.25);
  EXPECT_EQ(q.inter.all_reduce_busbw_gbps, 0.125);
  auto refused = [&](const std::string& text, const std::string& says) {
    std::ofstream(path) << text;
    try {
      load_machine_profile(path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  const std::string ok = "[machine]\nranks_per_node = 2\n[compute]\nmatmul_tflops_fp32 = 1.0\nmemory_gbps = 1.0\n";
  refused(ok + "overlap = 1.5\n", "overlap = 1.5");
  refused(ok + "matmul_tflops = 1.0\n", "did you mean");
  refused("[machine]\nranks_per_node = 0\n", "ranks_per_node = 0");
  refused("[machine]\nranks_per_node = 2\n[compute]\nmemory_gbps = 1.0\n", "no matmul rate");
  try {
    load_machine_profile(tmp_path("missing.toml"));
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[runtime] machine_profile"), std::string::npos) << e.what();
  }
}

TEST(MachineProfileFile, ShippedH100ProfileCitesItsSources) {
  const std::string path = source_path("configs/machines/h100-8gpu-ib400.toml");
  const MachineProfile p = load_machine_profile(path);
  EXPECT_EQ(p.machine.ranks_per_node, 8);
  EXPECT_GT(p.compute.matmul_tflops_bf16, 0);
  EXPECT_TRUE(p.intra.known() && p.inter.known());
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* source : {"nvidia-tensor-core-gpu-datasheet", "nccl-tests", "tuning.cc"})
    EXPECT_NE(text.find(source), std::string::npos) << source;
}

}  // namespace
}  // namespace wmtp::test
