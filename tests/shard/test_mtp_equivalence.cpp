// The MTP model through the sharding engine (mpirun -np 1..4) equals plain single-process LibTorch:
// 3 AdamW steps, accumulation 2, a fixed global batch of 24 sequences of different lengths and
// prompts (so ranks and micro-batches hold different numbers of valid tokens), the loss normalized
// by the step's global per-head counts. Every parameter must match torch::optim::AdamW on LocalParams
// fed the whole global batch at once (all-heads path) within 1e-5 relative (max|a-b| / max|b| per
// tensor), for each strategy x activation checkpointing x LoRA, with sequential unembedding. The
// hybrid strategies run in groups of 2 at np 4 and of 1 below (shard_test_util.h), and hybrid_shard
// over 10 steps also against full_shard at the same world size.
// bf16 compute: losses within 1e-2 of single-process bf16; gradients, gradient norms and parameters
// within bounds calibrated on how far bf16 itself is from fp32 (see the test).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "model/local_params.h"
#include "model/mtp_loss.h"
#include "rel_diff.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "shard_test_util.h"
#include "test_util.h"
#include "torch_reference.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 5;
constexpr int kGlobalBatch = 24;  // divisible by 2 micro-batches x 1, 2, 3, 4 ranks
constexpr int kMicro = 2;
constexpr int kSteps = 3;

// lr 2e-4: AdamW divides every element's gradient by its own magnitude, so elements whose gradient
// is near eps (here |g| ~ 4e-9 in some w1 entries) turn fp32 summation-order noise into update noise.
// Measured: first-step gradients agree to <= 3e-6 per tensor at N = 1..4, yet with lr 2e-3 two
// single-process LibTorch runs that merely sum in another order (all-heads vs sequential path)
// already differ by 1.2e-5 after 3 steps. At lr 2e-4 that floor is 1.3e-6 and the 1e-5 bound tests
// the engine, not rounding.
OptimizerConfig mtp_optimizer() {
  OptimizerConfig c;
  c.lr = 2e-4;
  c.betas = {0.9, 0.95};
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  c.max_grad_norm = 1.0;
  c.group_patterns = {"*norm*"};  // norms in their own group: per-segment lr / wd inside shards
  c.group_lr = {5e-4};
  c.group_weight_decay = {0.0};
  return c;
}

struct RunResult {
  std::vector<double> losses, norms;
  std::unordered_map<std::string, at::Tensor> first_grads;  // before the first clip/step
  std::unordered_map<std::string, at::Tensor> params;       // after the last step
};

std::vector<double> to_double(const std::vector<int64_t>& v) { return std::vector<double>(v.begin(), v.end()); }

// `micro` > 1: the global batch in that many micro-batches, gradients accumulated (one process).
RunResult reference_run(const MtpModel& model, std::optional<at::ScalarType> dtype, bool sequential, int micro = 1,
                        int steps = kSteps) {
  LocalParams local(model.param_specs(), model.init_params(kSeed), dtype);
  TorchAdamW opt(local, mtp_optimizer());
  MtpPassOptions so;
  so.sequential_unembedding = sequential;
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    const auto global = global_batch(kSeed, s, kGlobalBatch, model.args().vocab_size);
    const auto counts = to_double(count_valid_targets(make_batch(global).labels, model.n_future()));
    opt.zero_grad();
    double loss = 0;
    for (const MtpBatch& b :
         micro == 1 ? std::vector<MtpBatch>{make_batch(global)} : rank_micro_batches(global, 0, 1, micro))
      loss += mtp_forward_backward(model, local, b, counts, so).loss;
    r.losses.push_back(loss);
    if (s == 0)
      for (const ParamSpec& p : model.param_specs())
        if (p.trainable) r.first_grads[p.fqn] = local.param(p.fqn).grad().clone();
    r.norms.push_back(opt.clip_and_step());
  }
  for (const ParamSpec& s : model.param_specs()) r.params[s.fqn] = local.param(s.fqn).detach().clone();
  return r;
}

RunResult engine_run(const MtpModel& model, const ShardingConfig& sc, bool checkpoint, int steps = kSteps) {
  Communicator& comm = world_comm();
  const std::unique_ptr<ShardGroups> groups = is_hybrid(sc.strategy)
                                                  ? shard_groups(mpi().world(), hybrid_test_group_size(comm.size()))
                                                  : nullptr;
  ShardedModel engine(model.param_specs(), comm, sc, c10::Device(c10::kCPU), groups.get());
  engine.load_full(model.init_params(kSeed));
  ShardedAdamW opt(engine, mtp_optimizer());
  MtpPassOptions so;
  so.sequential_unembedding = true;
  so.activation_checkpointing = checkpoint;
  RunResult r;
  for (int s = 0; s < steps; ++s) {
    auto micro = rank_micro_batches(global_batch(kSeed, s, kGlobalBatch, model.args().vocab_size), comm.rank(),
                                    comm.size(), kMicro);
    // valid-token counts per head over the step's global batch: counted locally, all-reduced once
    at::Tensor counts = at::zeros({model.n_future()}, at::kLong);
    for (const MtpBatch& b : micro) counts += at::tensor(count_valid_targets(b.labels, model.n_future()), at::kLong);
    comm.all_reduce(counts, ReduceOp::Sum);
    std::vector<double> global(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
    opt.zero_grad();
    double loss = 0;
    for (const MtpBatch& b : micro) loss += mtp_forward_backward(model, engine, b, global, so).loss;
    r.losses.push_back(comm.all_reduce_scalar(loss, ReduceOp::Sum));
    if (s == 0) {
      engine.reduce_gradients();
      r.first_grads = engine.full_grads();
    }
    r.norms.push_back(opt.clip_grad_norm());
    opt.step();
  }
  EXPECT_EQ(engine.memory_stats().gathered_bytes, 0) << "gathered memory left after the steps";
  r.params = engine.full_params();
  return r;
}

void expect_equivalent(const RunResult& got, const RunResult& want, double tol, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], tol * std::abs(want.losses[s])) << what << " loss step " << s;
    EXPECT_NEAR(got.norms[s], want.norms[s], tol * want.norms[s]) << what << " grad norm step " << s;
  }
  std::string worst;
  EXPECT_LE(rel_diff(got.first_grads, want.first_grads, &worst), tol) << what << ": worst gradient " << worst;
  worst.clear();
  EXPECT_LE(rel_diff(got.params, want.params, &worst), tol) << what << ": worst parameter " << worst;
}

ShardingConfig fp32(const std::string& strategy) {
  ShardingConfig c;
  test::set_config(c, "strategy=" + strategy);
  c.param_dtype = at::kFloat;
  return c;
}

TEST(ShardMtp, Fp32StepsEqualSingleProcessAdamW) {
  for (bool lora : {false, true}) {
    MtpModel model(tiny_mtp_args(), lora ? tiny_lora() : LoraConfig{});
    const RunResult want = reference_run(model, std::nullopt, /*sequential=*/false);
    for (std::string strategy : {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_grad_op"})
      for (bool checkpoint : {false, true})
        expect_equivalent(engine_run(model, fp32(strategy), checkpoint), want, 1e-5,
                          strategy + (checkpoint ? " +ckpt" : "") + (lora ? " +lora" : ""));
  }
}

TEST(ShardMtp, NoSyncAccumulationAndNoPrefetchAreEquivalentToo) {
  MtpModel model(tiny_mtp_args(), tiny_lora());
  const RunResult want = reference_run(model, std::nullopt, false);
  ShardingConfig c = fp32("full_shard");
  c.no_sync = true;
  expect_equivalent(engine_run(model, c, false), want, 1e-5, "full_shard no_sync");
  c = fp32("full_shard");
  c.prefetch = false;
  expect_equivalent(engine_run(model, c, true), want, 1e-5, "full_shard no prefetch +ckpt");
  c = fp32("hybrid_shard");
  c.no_sync = true;
  expect_equivalent(engine_run(model, c, false), want, 1e-5, "hybrid_shard no_sync");
}

// Item 2 of hybrid sharding: 10 steps of hybrid_shard (2 x 2 at np 4) equal the single process and
// full_shard at the same world size, within the fp32 tolerance above, with and without LoRA.
TEST(ShardMtp, HybridEqualsFullShardAndSingleProcessOver10Steps) {
  constexpr int kLongSteps = 10;
  for (bool lora : {false, true}) {
    MtpModel model(tiny_mtp_args(), lora ? tiny_lora() : LoraConfig{});
    const std::string what = lora ? " +lora" : "";
    const RunResult want = reference_run(model, std::nullopt, /*sequential=*/false, 1, kLongSteps);
    const RunResult hybrid = engine_run(model, fp32("hybrid_shard"), false, kLongSteps);
    const RunResult full = engine_run(model, fp32("full_shard"), false, kLongSteps);
    expect_equivalent(hybrid, want, 1e-5, "hybrid_shard vs one process" + what);
    expect_equivalent(full, want, 1e-5, "full_shard vs one process" + what);
    expect_equivalent(hybrid, full, 1e-5, "hybrid_shard vs full_shard" + what);
  }
}

// Worst tensor of ||a - b|| / ||b - init|| over the elements `keep` selects: how far apart two runs'
// parameters are, relative to how far training moved them (the update), so the figure does not
// shrink with the weights' own scale.
double max_update_rel_l2(const std::unordered_map<std::string, at::Tensor>& a,
                         const std::unordered_map<std::string, at::Tensor>& b,
                         const std::unordered_map<std::string, at::Tensor>& init,
                         const std::unordered_map<std::string, at::Tensor>& keep, std::string* worst) {
  double m = 0;
  for (const auto& [k, want] : b) {
    at::Tensor sel = keep.at(k);
    at::Tensor w = want.to(at::kDouble).masked_select(sel), g = a.at(k).to(at::kDouble).masked_select(sel),
               i = init.at(k).to(at::kDouble).masked_select(sel);
    const double moved = (w - i).norm().item<double>();
    if (moved == 0) continue;  // frozen
    const double d = (g - w).norm().item<double>() / moved;
    if (d > m) m = d, *worst = k;
  }
  return m;
}

// bf16 compute cannot match bitwise, so the bounds are calibrated on bf16 itself: single-process
// LibTorch in bf16 against the same run in fp32 ("exact") shows how far bf16 rounding alone moves
// first-step gradients (G, max|a-b|/max|b| per tensor) and the parameters after 3 steps (U,
// update-relative L2 per tensor). The engine adds only summation-order differences and bf16
// reductions, so it must stay within 2G and 2U of exact and its gradient norms within 2^-8 (one bf16
// ulp, relative) of exact (measured <= 5e-4). A wrong gradient, norm, clip or per-group lr exceeds
// them while the losses after 3 steps still agree to 1e-2.
// G and U are maxima over single-process bf16 runs with the global batch whole and in 2 and 4
// accumulated micro-batches (the engine is one more such rounding of the same step). U counts only
// the elements whose exact first-step gradient exceeds 2G of their tensor's largest: below that, bf16
// does not fix the gradient's sign, and as Adam's first steps are sign-like such an element moves a
// full step either way. With every element counted, one such element of a 14-element norm decided U
// and the engine's ratio swung with the draw (seeds 1..16: up to 3.2, before the counter-based init
// as after it). Now, over seeds 1..16 at -np 1..4: U 0.026 at kSeed (0.23 with every element),
// engine ratios <= 1.51 (U) and <= 1.76 (G).
TEST(ShardMtp, Bf16StepsMatchSingleProcessBf16) {
  MtpModel model(tiny_mtp_args());
  const RunResult exact = reference_run(model, std::nullopt, /*sequential=*/true);
  const auto init = model.init_params(kSeed);
  std::vector<RunResult> bf16_runs;
  double grad_noise = 0, update_noise = 0;
  std::string worst;
  for (int micro : {1, 2, 4}) {
    bf16_runs.push_back(reference_run(model, at::kBFloat16, /*sequential=*/true, micro));
    grad_noise = std::max(grad_noise, rel_diff(bf16_runs.back().first_grads, exact.first_grads, &worst));
  }
  std::unordered_map<std::string, at::Tensor> determined;
  for (const auto& [k, g] : exact.first_grads) determined[k] = g.abs() > 2 * grad_noise * g.abs().max();
  for (const ParamSpec& p : model.param_specs())
    if (!determined.count(p.fqn)) determined[p.fqn] = at::zeros(p.shape, at::kBool);  // not trained
  for (const RunResult& r : bf16_runs)
    update_noise = std::max(update_noise, max_update_rel_l2(r.params, exact.params, init, determined, &worst));
  const RunResult& want = bf16_runs.front();
  ASSERT_GT(grad_noise, 0) << "the bf16 reference computed in fp32?";
  ASSERT_GT(update_noise, 0);
  for (std::string strategy : {"full_shard", "hybrid_shard"})
    for (std::string reduce : {"fp32", "bf16"}) {
      ShardingConfig c;  // bf16 params
      test::set_config(c, "strategy=" + strategy);
      test::set_config(c, "reduce_dtype=" + reduce);
      RunResult got = engine_run(model, c, false);
      const std::string what = strategy + " reduce " + reduce;
      for (int s = 0; s < kSteps; ++s) {
        EXPECT_NEAR(got.losses[s], want.losses[s], 1e-2 * std::abs(want.losses[s])) << what << " step " << s;
        EXPECT_NEAR(got.norms[s], exact.norms[s], std::ldexp(1.0, -8) * exact.norms[s]) << what << " step " << s;
      }
      worst.clear();
      EXPECT_LE(rel_diff(got.first_grads, exact.first_grads, &worst), 2 * grad_noise)
          << what << ": worst gradient " << worst << " (bf16 alone: " << grad_noise << ")";
      worst.clear();
      EXPECT_LE(max_update_rel_l2(got.params, exact.params, init, determined, &worst), 2 * update_noise)
          << what << ": worst parameter " << worst << " (bf16 alone: " << update_noise << ")";
    }
}

// A critic: frozen backbone (fp32 here, for an exact comparison) plus a trainable value head, a
// masked squared error normalized by the global count of valid positions.
TEST(ShardMtp, FrozenBackboneWithValueHeadEqualsSingleProcess) {
  ValueHeadConfig vh;
  vh.enabled = true;
  vh.type = ValueHeadType::Mlp;
  vh.bias_init = 0.5;
  ModelArgs args = tiny_mtp_args();  // a value model is an n_future = 1 backbone: trunk + head 0
  args.n_layers = args.n_trunk_blocks() + 1;
  args.n_future_tokens = 1;
  MtpModel model(args, LoraConfig{}, vh, /*freeze_base=*/true);
  auto value_loss = [&](ParamSource& src, const MtpBatch& b, double count) {
    at::Tensor v = model.forward_values(src, b.tokens, ForwardOptions{true, false}).to(at::kFloat);
    at::Tensor m = b.labels.ne(-100).to(at::kFloat);
    at::Tensor target = (b.tokens % 3).to(at::kFloat) * 0.5;
    return ((v - target).pow(2) * m).sum() / count;
  };
  OptimizerConfig oc = mtp_optimizer();
  oc.group_patterns.clear(), oc.group_lr.clear(), oc.group_weight_decay.clear();
  oc.lr = 1e-3;

  // Under hybrid_shard the frozen backbone's shards, too, are the group's (gathered inside it).
  for (std::string strategy : {"full_shard", "hybrid_shard"}) {
    LocalParams local(model.param_specs(), model.init_params(kSeed));
    TorchAdamW ref_opt(local, oc);
    const int n = world_comm().size(), group = strategy == "full_shard" ? n : hybrid_test_group_size(n);
    const std::unique_ptr<ShardGroups> groups = strategy == "full_shard" ? nullptr : shard_groups(mpi().world(), group);
    ShardedModel engine(model.param_specs(), world_comm(), fp32(strategy), c10::Device(c10::kCPU), groups.get());
    engine.load_full(model.init_params(kSeed));
    ShardedAdamW opt(engine, oc);
    for (int s = 0; s < kSteps; ++s) {
      auto global = global_batch(kSeed + 1, s, kGlobalBatch, model.args().vocab_size);
      MtpBatch all = make_batch(global);
      const double count = all.labels.ne(-100).sum().item<double>();
      ref_opt.zero_grad();
      value_loss(local, all, count).backward();
      ref_opt.clip_and_step();
      opt.zero_grad();
      for (const MtpBatch& b : rank_micro_batches(global, world_comm().rank(), n, kMicro))
        value_loss(engine, b, count).backward();
      opt.clip_grad_norm();
      opt.step();
    }
    std::unordered_map<std::string, at::Tensor> want;
    for (const ParamSpec& s : model.param_specs()) want[s.fqn] = local.param(s.fqn).detach();
    std::string worst;
    EXPECT_LE(rel_diff(engine.full_params(), want, &worst), 1e-5) << strategy << ": " << worst;
    MemoryStats m = opt.memory_stats();
    int64_t value_head = 0;
    for (const ParamSpec& s : model.param_specs())
      if (s.trainable) value_head += s.numel();
    // A rank holds 1 / group of the value head padded to the world size.
    const int64_t held = (value_head + n - 1) / n * (n / group);
    EXPECT_EQ(m.optimizer_bytes, 8 * held) << strategy << ": optimizer state only for the value head";
    EXPECT_EQ(m.grad_bytes, 4 * held) << strategy << ": gradients only for the value head";
  }
}

}  // namespace
}  // namespace wmtp::test
