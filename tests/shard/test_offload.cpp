// CPU offload ([sharding] offload = "optimizer" | "full"), mpirun -np 1..4, with the CPU as the
// device: the offloaded masters, moments, gradients and parameter copies are buffers of their own,
// so every copy between "device" and host runs here as it does on a GPU.
// - 20 fp32 steps of the MTP model give the same losses (within 1e-6 relative, here exactly) and the
//   same checkpoint pieces, bit for bit — parameters and both AdamW moments — as without offload, for
//   full_shard, shard_grad_op and hybrid_shard, fp32 and bf16, LoRA and activation checkpointing;
// - the device keeps what offload says (optimizer: gradients + the param_dtype copy; full: nothing
//   persistent) and the host the rest, as estimate_memory() plans it;
// - gathers read the device copy the optimizer uploaded, not the host masters;
// - no_shard with offload is refused, naming the key.
// The host AdamW itself is held to torch::optim::AdamW in test_optimizer.cpp.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "offload_run.h"
#include "rel_diff.h"
#include "shard/memory_stats.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

const c10::Device kCpu(c10::kCPU);

ShardingConfig config(const std::string& strategy, const std::string& dtype, const std::string& offload) {
  ShardingConfig c;
  test::set_config(c, "strategy=" + strategy);
  test::set_config(c, "param_dtype=" + dtype);
  test::set_config(c, "offload=" + offload);
  return c;
}

TEST(Offload, SameLossesAndBitwiseSameCheckpointsAsWithout) {
  for (std::string strategy : {"full_shard", "shard_grad_op", "hybrid_shard"})
    for (std::string dtype : {"fp32", "bf16"}) {
      const int steps = dtype == "fp32" && strategy == "full_shard" ? 20 : 4;
      const OffloadRun none = run_offload(config(strategy, dtype, "none"), world_comm(), kCpu, steps);
      for (std::string offload : {"optimizer", "full"}) {
        const std::string what = strategy + " " + dtype + " offload " + offload;
        const OffloadRun r = run_offload(config(strategy, dtype, offload), world_comm(), kCpu, steps);
        ASSERT_EQ(r.losses.size(), none.losses.size());
        EXPECT_LE(rel_diff(at::tensor(r.losses), at::tensor(none.losses)), 1e-6) << what;
        EXPECT_EQ(r.losses, none.losses) << what << ": the same arithmetic on the same values";
        EXPECT_EQ(differing_pieces(r.params, none.params), 0) << what << " parameters";
        EXPECT_EQ(differing_pieces(r.exp_avg, none.exp_avg), 0) << what << " exp_avg";
        EXPECT_EQ(differing_pieces(r.exp_avg_sq, none.exp_avg_sq), 0) << what << " exp_avg_sq";
      }
    }
}

TEST(Offload, LoraAndCheckpointingAreUnchanged) {
  for (bool lora : {false, true})
    for (bool checkpoint : {false, true}) {
      if (!lora && !checkpoint) continue;
      const ShardingConfig none = config("full_shard", "bf16", "none");
      const OffloadRun base = run_offload(none, world_comm(), kCpu, 3, lora, checkpoint);
      for (std::string offload : {"optimizer", "full"}) {
        const std::string what = std::string(lora ? "lora " : "") + (checkpoint ? "checkpointing " : "") + offload;
        const OffloadRun r = run_offload(config("full_shard", "bf16", offload), world_comm(), kCpu, 3, lora,
                                         checkpoint);
        EXPECT_EQ(r.losses, base.losses) << what;
        EXPECT_EQ(differing_pieces(r.params, base.params), 0) << what;
        EXPECT_EQ(differing_pieces(r.exp_avg_sq, base.exp_avg_sq), 0) << what;
      }
    }
}

TEST(Offload, DeviceAndHostHoldWhatThePlanSays) {
  MtpModel model(tiny_mtp_args());
  for (std::string dtype : {"fp32", "bf16"})
    for (std::string offload : {"none", "optimizer", "full"}) {
      const std::string what = dtype + " offload " + offload;
      const ShardingConfig sc = config("full_shard", dtype, offload);
      const OffloadRun r = run_offload(sc, world_comm(), kCpu, 2);
      const MemoryStats planned = estimate_memory(ShardPlan(model.param_specs(), world_comm().size()), sc);
      EXPECT_EQ(r.memory.offload, planned.offload) << what;
      EXPECT_EQ(r.memory.device_state_bytes(), planned.device_state_bytes()) << what;
      EXPECT_EQ(r.memory.host_state_bytes(), planned.host_state_bytes()) << what;
      const int64_t es = dtype == "bf16" ? 2 : 4;
      const int64_t elems = planned.master_bytes / 4;
      if (offload == "none") {
        EXPECT_EQ(planned.device_state_bytes(), (16 + (es == 2 ? 2 : 0)) * elems) << what;
      }
      if (offload == "optimizer") {
        EXPECT_EQ(planned.device_state_bytes(), (4 + es) * elems) << what << ": gradients and the gathers' copy";
        EXPECT_GT(r.memory.staging_bytes, 0) << what;
        // one param_dtype copy per trainable unit and step, made by the optimizer
        EXPECT_EQ(r.last_step.param_casts, static_cast<int64_t>(model.unit_names().size())) << what;
      }
      if (offload == "full") {
        EXPECT_EQ(planned.device_state_bytes(), 0) << what;
      }
    }
}

TEST(Offload, GathersReadTheUploadedCopyNotTheHostMasters) {
  MtpModel model(tiny_mtp_args());
  ShardedModel engine(model.param_specs(), world_comm(), config("full_shard", "fp32", "optimizer"), kCpu);
  engine.init_shards([&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, 5); });
  ShardedAdamW opt(engine, OptimizerConfig{});
  opt.zero_grad();
  opt.clip_grad_norm();
  opt.step();  // zero gradients: only weight decay moves the masters; the copies go up
  const std::string unit = "layers.0", fqn = "layers.0.attention.wq.weight";
  auto gathered = [&] {
    c10::NoGradGuard no_grad;
    at::Tensor w = engine.begin_unit(unit).at(fqn).to(at::kFloat).clone();
    engine.end_unit(unit, at::Tensor());
    return w;
  };
  const at::Tensor before = gathered();
  for (TrainableShard& sh : engine.trainable_shards()) {
    c10::NoGradGuard no_grad;
    sh.master.add_(1.0);  // behind the engine's back: the device copy must not see it
  }
  EXPECT_TRUE(at::equal(gathered(), before));
  engine.invalidate_gathered();  // as after a load: the copies are remade from the host masters
  EXPECT_NEAR((gathered() - before).mean().item<double>(), 1.0, 1e-3);
}

TEST(Offload, NoShardIsRefusedNamingTheKey) {
  MtpModel model(tiny_mtp_args());
  try {
    ShardedModel engine(model.param_specs(), world_comm(), config("no_shard", "bf16", "optimizer"), kCpu);
    FAIL() << "no_shard + offload accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("[sharding] offload"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wmtp::test
