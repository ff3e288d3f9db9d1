// The dry run's memory model against what a step really allocates (mpirun -np 1, the CPU):
// a counting allocator (counting_allocator.h, the CPU's counterpart of the CUDA caching allocator's
// "allocated" figures) measures (1) the bytes the trunk's blocks keep for backward, to be
// n_trunk x block_saved(), and (2) the peak of a whole training step of the engine (state, gathered
// units, activations, loss buffers, transients) on the second step, to be plan_memory()'s total less
// its runtime share. Full fine-tuning and LoRA, fp32 and bf16, with and without activation
// checkpointing, sequential and all-heads unembedding; this LibTorch's attention (explicit on 1.13).
// The GPU figures (fused attention, the caching allocator's reserved peak) are checked against the
// allocator on a GPU by bench-train-throughput (docs/sharding.md, "Dry run").
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <torch/version.h>

#include <cstdio>

#include "counting_allocator.h"
#include "model/mtp_loss.h"
#include "model/transformer.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "../shard/shard_test_util.h"
#include "test_util.h"
#include "tiny_model.h"
#include "plan/memory_plan.h"

namespace wmtp::test {
namespace {

constexpr int64_t kRows = 4, kSeq = 128;

// The shared tiny model, wider and longer: the terms this test measures must stand out from the
// allocator's noise (a few KiB of bookkeeping per step), so every tensor kind is tens of KiB or more.
ModelArgs step_args() {
  ModelArgs a = tiny_args(/*trunk=*/4, /*n_future=*/2);
  a.dim = 96;
  a.n_kv_heads = 4;  // no GQA: the estimate's k, v at n_heads width is what repeat_kv makes anyway
  a.vocab_size = 2048;
  a.multiple_of = 32;
  a.max_seq_len = kSeq;
  return a;
}

// The shared LoRA fixture at a rank whose activations are measurable.
LoraConfig step_lora() {
  LoraConfig l = tiny_lora();
  l.rank = 4;
  l.alpha = 8;
  return l;
}

struct Case {
  std::string dtype;
  bool lora, checkpointing, sequential;
  std::string name() const {
    return dtype + (lora ? " lora" : " full") + (checkpointing ? " +ckpt" : "") + (sequential ? "" : " all-heads");
  }
};

MemoryPlanInput plan_input(const Case& c) {
  MemoryPlanInput in;
  in.trained.args = step_args();
  if (c.lora) in.trained.lora = step_lora();
  test::set_config(in.sharding, "param_dtype=" + c.dtype);
  in.world_size = 1;
  in.micro_batch = kRows;
  in.seq = kSeq;
  in.checkpointing = c.checkpointing;
  in.sequential = c.sequential;
  in.cuda = false;
  in.fused_attention = kFusedAttention;
  return in;
}

MtpBatch full_batch(int64_t vocab) {
  MtpBatch b;
  b.tokens = at::randint(1, vocab, {kRows, kSeq}, at::TensorOptions().dtype(at::kLong));
  b.labels = b.tokens.clone();
  b.labels.narrow(1, 0, 4).fill_(-100);  // a short prompt
  return b;
}

TEST(StepMemory, TrunkBlocksKeepWhatBlockSavedSays) {
  CountingCpuAllocator& alloc = CountingCpuAllocator::install();
  for (std::string dtype : {"fp32", "bf16"})
    for (bool lora : {false, true}) {
      const Case c{dtype, lora, false, true};
      const MemoryPlanInput in = plan_input(c);
      MtpModel model(in.trained.args, in.trained.lora);
      ShardedModel engine(model.param_specs(), world_comm(), in.sharding);
      engine.init_shards(
          [&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, 3); });
      const MtpBatch b = full_batch(in.trained.args.vocab_size);
      c10::AutoGradMode on(true);
      const int64_t before = alloc.live();
      const std::map<int64_t, int> sizes_before = alloc.live_sizes();
      at::Tensor z = model.forward_trunk(engine, b.tokens, ForwardOptions{true, false});
      std::string grown;
      for (const auto& [size, n] : alloc.live_sizes()) {
        auto it = sizes_before.find(size);
        const int was = it == sizes_before.end() ? 0 : it->second;
        if (n != was) grown += " " + std::to_string(size) + " B x " + std::to_string(n - was) + ";";
      }
      const MemoryStats m = engine.memory_stats();  // the engine's own: gathered, cached, param_dtype copies
      const int64_t kept = alloc.live() - before - static_cast<int64_t>(z.nbytes()) - m.gathered_bytes -
                           m.gather_cache_bytes - m.cast_bytes;
      MicroBatchShape s;
      s.args = in.trained.args;
      s.lora = in.trained.lora;
      s.base_trainable = !lora;
      s.rows = kRows;
      s.seq = kSeq;
      s.compute_bytes = dtype == "bf16" ? 2 : 4;
      s.fused_attention = kFusedAttention;
      s.embedding_trains = !lora;
      s.mean_keeps_input = TORCH_VERSION_MAJOR < 2;
      const BlockSaved blk = block_saved(s);
      const int64_t want = trunk_saved(s);
      std::string kinds;
      for (const MemoryItem& i : blk.items()) kinds += " " + i.name + " " + std::to_string(i.bytes);
      EXPECT_NEAR(double(kept), double(want), 0.02 * double(want))
          << c.name() << ": measured " << kept << " B, modelled " << want << " B (per block" << kinds
          << "); allocations kept:" << grown;
      z = at::Tensor();
    }
}

TEST(StepMemory, AStepPeaksWherePlanMemorySays) {
  CountingCpuAllocator& alloc = CountingCpuAllocator::install();
  std::vector<Case> cases;
  for (std::string dtype : {"fp32", "bf16"})
    for (bool lora : {false, true})
      for (bool ckpt : {false, true}) cases.push_back({dtype, lora, ckpt, true});
  cases.push_back({"fp32", false, false, false});
  cases.push_back({"bf16", false, true, false});
  for (const Case& c : cases) {
    const MemoryPlanInput in = plan_input(c);
    const MemoryPlan plan = plan_memory(in);
    MtpModel model(in.trained.args, in.trained.lora);
    const int64_t before = alloc.live();
    double measured = 0;
    {
      ShardedModel engine(model.param_specs(), world_comm(), in.sharding);
      engine.init_shards(
          [&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, 3); });
      engine.set_reshard_after_forward("layers." + std::to_string(in.trained.args.n_trunk_blocks() - 1), false);
      ShardedAdamW opt(engine, OptimizerConfig{});
      const MtpBatch b = full_batch(in.trained.args.vocab_size);
      const std::vector<int64_t> n = count_valid_targets(b.labels, model.n_future());
      const std::vector<double> counts(n.begin(), n.end());
      MtpPassOptions so;
      so.activation_checkpointing = c.checkpointing;
      so.sequential_unembedding = c.sequential;
      for (int step = 0; step < 2; ++step) {
        alloc.reset_peak();
        opt.zero_grad();
        mtp_forward_backward(model, engine, b, counts, so);
        opt.clip_grad_norm();
        opt.step();
      }
      measured = double(alloc.peak() - before);
    }
    std::string at_peak;
    for (const auto& [size, count] : alloc.peak_sizes())
      if (size * count >= 16384) at_peak += " " + std::to_string(size) + "x" + std::to_string(count);
    const double want = double(plan.device_total - plan.runtime - plan.allocator_overhead);  // what is allocated
    std::string items;
    for (const MemoryItem& i : plan.peak.items) items += "; " + i.name + " " + std::to_string(i.bytes);
    printf("%-24s measured %9.0f KiB, planned %9.0f KiB (%+.1f %%), peak during %s\n", c.name().c_str(),
           measured / 1024, want / 1024, 100 * (want - measured) / measured, plan.peak.phase.c_str());
    if (getenv("WMTP_STEP_MEMORY_DETAIL"))
      printf("   planned: state %lld gathered %lld%s\n   alive:%s\n", (long long)plan.state.device_state_bytes(),
             (long long)plan.gathered, items.c_str(), at_peak.c_str());
    EXPECT_NEAR(want, measured, 0.05 * measured)
        << c.name() << ": state " << plan.state.device_state_bytes() << ", gathered " << plan.gathered
        << ", peak during " << plan.peak.phase << items << "; alive at the peak:" << at_peak;
  }
}

}  // namespace
}  // namespace wmtp::test
