// train-rho1's pipeline through the sharding engine (mpirun -np 1..4, full_shard, fp32, 2
// micro-batches per rank), stepped by the trainer's train_step (train/train_step.h), equals one
// process of plain LibTorch over 3 AdamW steps: each step the single process scores the whole
// global batch of 24 ragged sequences at once (all-heads logits of the policy and of the next-token
// reference, CE and excess written here), selects the top 70% per head by sorting, and trains with
// the all-heads loss normalized by the selected (or valid) counts, stepping torch::optim::AdamW.
// Every rank's selection must equal the rows it holds of that selection exactly; losses, gradient
// norms, first-step gradients and final parameters within 1e-5. max_grad_norm sits below every step's
// norm, so the clip is active: a train_step that skipped it would move the parameters past that bound.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../shard/shard_test_util.h"
#include "../shard/torch_reference.h"
#include "model/local_params.h"
#include "model/mtp_loss.h"
#include "rel_diff.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "train/metrics.h"
#include "pipelines/mtp_pipeline.h"
#include "pipelines/rho1_pipeline.h"
#include "train/run_models.h"
#include "train/train_step.h"
#include "train/trainer.h"
#include "reference_ce.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 5, kRefSeed = 12;
constexpr int kGlobalBatch = 24;  // 2 micro-batches per rank at 1..4 ranks
constexpr int kMicro = 2;
constexpr int kSteps = 3;
// Below every step's gradient norm (checked): the clip scales each step's gradients, so a trainer that
// skipped clipping would update by several times the reference's step and fail the parameter check.
constexpr double kMaxGradNorm = 0.05;

OptimizerConfig optimizer() {
  OptimizerConfig c;
  c.lr = 2e-4;  // see test_mtp_equivalence.cpp: larger rates turn fp32 summation order into update noise
  c.betas = {0.9, 0.95};
  c.weight_decay = 0.1;
  c.max_grad_norm = kMaxGradNorm;
  return c;
}

ModelArgs reference_args() {
  ModelArgs a = tiny_mtp_args();
  a.n_future_tokens = 1;
  a.n_layers = 3;
  return a;
}

struct RunResult {
  std::vector<double> losses, norms;
  std::vector<std::vector<double>> selected;  // per step, per head (global)
  std::vector<at::Tensor> step_weights;       // single process: [24, S, K] per step
  std::unordered_map<std::string, at::Tensor> first_grads, params;
};

RunResult single_process(const MtpModel& policy, const MtpModel& ref, const std::string& norm, int steps = kSteps) {
  LocalParams local(policy.param_specs(), policy.init_params(kSeed));
  LocalParams ref_local(ref.param_specs(), ref.init_params(kRefSeed));
  TorchAdamW opt(local, optimizer());
  MtpPassOptions all_heads;
  all_heads.sequential_unembedding = false;
  RunResult r;
  const int64_t K = policy.n_future();
  for (int s = 0; s < steps; ++s) {
    MtpBatch b = make_batch(global_batch(kSeed, s, kGlobalBatch, policy.args().vocab_size));
    at::Tensor pce, rce;
    {
      c10::NoGradGuard no_grad;
      pce = double_token_ce(policy.forward_logits(local, b.tokens, {}), b.labels);
      rce = double_token_ce(ref.forward_logits(ref_local, b.tokens, {}), b.labels);
    }
    const int64_t B = b.tokens.size(0), S = b.tokens.size(1);
    at::Tensor w = at::zeros({B, S, K}, at::kFloat);
    std::vector<double> counts(size_t(K), 0.0), selected(size_t(K), 0.0);
    for (int64_t k = 1; k <= K; ++k) {
      std::vector<double> values;
      for (int64_t i = 0; i < B; ++i)
        for (int64_t t = 0; t + k < S; ++t)
          if (!std::isnan(pce[i][t][k - 1].item<double>()))
            values.push_back(pce[i][t][k - 1].item<double>() - rce[i][t + k - 1][0].item<double>());
      std::sort(values.begin(), values.end(), std::greater<double>());
      const int64_t n = int64_t(values.size()), keep = n ? 1 + (7 * (n - 1)) / 10 : 0;
      for (int64_t i = 0; i < B; ++i)
        for (int64_t t = 0; t + k < S; ++t) {
          const double p = pce[i][t][k - 1].item<double>();
          if (std::isnan(p) || p - rce[i][t + k - 1][0].item<double>() < values[size_t(keep - 1)]) continue;
          w[i][t][k - 1] = 1.0f;
          selected[size_t(k - 1)] += 1;
        }
      counts[size_t(k - 1)] = norm == "selected" ? selected[size_t(k - 1)] : double(n);
    }
    b.weights = w;
    opt.zero_grad();
    r.losses.push_back(mtp_forward_backward(policy, local, b, counts, all_heads).loss);
    if (s == 0)
      for (const ParamSpec& p : policy.param_specs()) r.first_grads[p.fqn] = local.param(p.fqn).grad().clone();
    r.norms.push_back(opt.clip_and_step());
    r.selected.push_back(selected);
    r.step_weights.push_back(w);
  }
  for (const ParamSpec& p : policy.param_specs()) r.params[p.fqn] = local.param(p.fqn).detach().clone();
  return r;
}

MicroBatch micro_batch(const MtpBatch& b) {
  MicroBatch mb;
  mb.batch.tokens = b.tokens;
  mb.batch.labels = b.labels;
  mb.batch.attention_mask = at::ones_like(b.tokens);
  return mb;
}

RunResult pipeline_run(const MtpModel& policy, const std::string& norm, const RunResult& want,
                       const std::string& strategy = "full_shard", int steps = kSteps) {
  Communicator& comm = world_comm();
  const int rank = comm.rank(), world = comm.size();
  TrainerConfigs cfg;
  cfg.model.sequential_unembedding = true;
  cfg.model.loss_chunk_size = 3;
  set_config(cfg.sharding, "strategy=" + strategy);
  cfg.sharding.param_dtype = at::kFloat;
  ModelSpec pspec;
  pspec.args = policy.args();
  ModelSpec rspec;
  rspec.role = "reference";
  rspec.args = reference_args();
  rspec.frozen = true;
  const std::unique_ptr<ShardGroups> groups = is_hybrid(cfg.sharding.strategy)
                                                  ? shard_groups(mpi().world(), hybrid_test_group_size(world))
                                                  : nullptr;
  ModelHandle trained = build_model(pspec, comm, cfg.sharding, kSeed, c10::Device(c10::kCPU), groups.get());
  ModelHandle frozen = build_model(rspec, comm, cfg.sharding, kRefSeed, c10::Device(c10::kCPU), groups.get());
  ShardedAdamW opt(*trained.engine, optimizer());

  Rho1Config rc;
  rc.reference = "(built by the test)";
  rc.normalization = norm == "valid" ? Rho1Normalization::Valid : Rho1Normalization::Selected;
  MtpPolicyPipeline pipeline(std::make_unique<Rho1Weighting>(rc));
  RunContext ctx;
  ctx.settings = pipeline_settings(cfg);
  ctx.comm = &comm;
  ctx.world = mpi().world();
  ctx.trained = &trained;
  ctx.frozen = {&frozen};
  pipeline.attach(ctx);

  RunResult r;
  for (int s = 0; s < steps; ++s) {
    const auto global = global_batch(kSeed, s, kGlobalBatch, policy.args().vocab_size);
    std::vector<MicroBatch> mbs;
    for (const MtpBatch& b : rank_micro_batches(global, rank, world, kMicro)) mbs.push_back(micro_batch(b));
    const BatchGeometry geo{kGlobalBatch, kGlobalBatch / (kMicro * world), world, rank};  // kMicro micro-batches
    StepContext step_ctx{s, steps, &geo, LossNormalization::Global};
    TrainStepOptions options;
    std::vector<at::Tensor> weights;  // the plan's, for this rank's micro-batches
    options.after_plan = [&](const StepPlan& plan) {
      for (const MicroBatchPlan& p : plan.micro_batches) weights.push_back(p.weights);
    };
    if (s == 0)
      options.after_backward = [&] {
        trained.engine->reduce_gradients();
        r.first_grads = trained.engine->full_grads();
      };
    // The trainer's own step: train_step's lr factor 1 = the optimizer's lr, as the reference.
    const TrainStepResult step = train_step(pipeline, mbs, opt, comm, step_ctx, 1.0, options);
    EXPECT_TRUE(step.applied) << "step " << s;
    r.losses.push_back(step.loss);
    r.norms.push_back(step.grad_norm);

    // This rank's rows of the single process's selection (begin_step's weights): global row
    // rank + world * (local row).
    int64_t row = 0;
    EXPECT_EQ(weights.size(), mbs.size()) << "step " << s;
    for (size_t m = 0; m < weights.size(); ++m) {
      const at::Tensor& w = weights[m];
      for (int64_t i = 0; i < w.size(0); ++i, ++row) {
        at::Tensor expect = want.step_weights[size_t(s)][rank + world * row].narrow(0, 0, w.size(1));
        EXPECT_TRUE(w[i].equal(expect)) << "step " << s << " global row " << rank + world * row;
      }
    }
    const NamedStats& g = step.stats;
    const MetricsRecord& rec = step.rec;
    const int64_t K = policy.n_future();
    std::vector<double> selected;
    double sel_total = 0, valid_total = 0;
    for (int64_t k = 0; k < K; ++k) {
      selected.push_back(g.get("selected", size_t(k)));
      sel_total += selected.back(), valid_total += g.get("count", size_t(k));
    }
    r.selected.push_back(selected);
    EXPECT_NEAR(rec.get("train/selection_ratio"), sel_total / valid_total, 1e-12);
    EXPECT_GT(rec.get("train/selection_ratio"), 0.69);
    EXPECT_LT(rec.get("train/selection_ratio"), 0.75);
  }
  r.params = trained.engine->full_params();
  return r;
}

TEST(Rho1Pipeline, ShardedStepsEqualOneProcessWithTheSelectionOfTheWholeStep) {
  MtpModel policy(tiny_mtp_args()), ref(reference_args());
  for (std::string norm : {"selected", "valid"}) {
    const RunResult want = single_process(policy, ref, norm);
    const RunResult got = pipeline_run(policy, norm, want);
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_EQ(got.selected[size_t(s)], want.selected[size_t(s)]) << norm << " step " << s;
      EXPECT_NEAR(got.losses[size_t(s)], want.losses[size_t(s)], 1e-5 * want.losses[size_t(s)])
          << norm << " step " << s;
      EXPECT_NEAR(got.norms[size_t(s)], want.norms[size_t(s)], 1e-5 * want.norms[size_t(s)]) << norm << " step " << s;
      EXPECT_GT(want.norms[size_t(s)], 2 * kMaxGradNorm) << norm << " step " << s << ": the clip must be active";
    }
    std::string worst;
    const double grad_diff = rel_diff(got.first_grads, want.first_grads, &worst);
    EXPECT_LE(grad_diff, 1e-5) << norm << ": gradient " << worst;
    worst.clear();
    const double param_diff = rel_diff(got.params, want.params, &worst);
    EXPECT_LE(param_diff, 1e-5) << norm << ": parameter " << worst;
    if (world_comm().rank() == 0)
      printf(
          "np %d, normalization %s: worst relative difference %.2e (first gradients), %.2e (parameters after %d "
          "steps)\n",
          world_comm().size(), norm.c_str(), grad_diff, param_diff, kSteps);
    // The two normalizations differ (so neither comparison is vacuous).
    if (norm == "valid") {
      const RunResult sel = single_process(policy, ref, "selected");
      EXPECT_GT(std::abs(sel.losses[0] - want.losses[0]), 1e-3 * want.losses[0]);
    }
  }
}

// Hybrid sharding (2 x 2 at np 4, groups of one below; the frozen reference's shards in the groups
// too): 10 steps equal the single process and full_shard at the same world size within 1e-5, with
// every rank's selection that of the whole step.
TEST(Rho1Pipeline, HybridEqualsFullShardAndOneProcessOver10Steps) {
  constexpr int kLongSteps = 10;
  MtpModel policy(tiny_mtp_args()), ref(reference_args());
  const RunResult want = single_process(policy, ref, "selected", kLongSteps);
  const RunResult hybrid = pipeline_run(policy, "selected", want, "hybrid_shard", kLongSteps);
  const RunResult full = pipeline_run(policy, "selected", want, "full_shard", kLongSteps);
  for (const auto& [got, what] : {std::make_pair(&hybrid, "hybrid_shard"), std::make_pair(&full, "full_shard")}) {
    ASSERT_EQ(got->losses.size(), size_t(kLongSteps)) << what;
    for (size_t s = 0; s < size_t(kLongSteps); ++s) {
      EXPECT_EQ(got->selected[s], want.selected[s]) << what << " step " << s;
      EXPECT_NEAR(got->losses[s], want.losses[s], 1e-5 * want.losses[s]) << what << " step " << s;
      EXPECT_NEAR(got->norms[s], want.norms[s], 1e-5 * want.norms[s]) << what << " step " << s;
      EXPECT_NEAR(hybrid.losses[s], full.losses[s], 1e-5 * full.losses[s]) << "hybrid vs full_shard step " << s;
    }
    std::string worst;
    EXPECT_LE(rel_diff(got->first_grads, want.first_grads, &worst), 1e-5) << what << ": gradient " << worst;
    worst.clear();
    EXPECT_LE(rel_diff(got->params, want.params, &worst), 1e-5) << what << ": parameter " << worst;
  }
  std::string worst;
  EXPECT_LE(rel_diff(hybrid.params, full.params, &worst), 1e-5) << "hybrid vs full_shard: parameter " << worst;
}

}  // namespace
}  // namespace wmtp::test
