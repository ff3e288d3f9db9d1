// train-verifiable's pipeline (MtpPolicyPipeline with VerifiableWeighting) through the sharding
// engine (mpirun -np 1..4) equals plain single-process LibTorch: a frozen critic (backbone + mlp value head, with and without LoRA adapters applied) and
// the MTP policy (full fine-tuning and LoRA), 3 AdamW steps with accumulation (global batch 24,
// micro 2: 12/6/4/3 micro-batches per rank), ragged sequences. The pipeline is stepped by the
// trainer's own train_step (train/train_step.h). The reference runs the critic and the
// policy on LocalParams over the whole global batch at once (all-heads loss path), with the
// weights, the EMA and the metrics computed in double in this test (verifiable_reference.h).
// fp32; every parameter, loss and gradient norm within 1e-5 relative; then validation (batch
// statistics per micro-batch) against the same reference.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include "core/config.h"
#include "model/local_params.h"
#include "model/mtp.h"
#include "model/mtp_loss.h"
#include "rel_diff.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "shard_test_util.h"
#include "test_util.h"
#include "torch_reference.h"
#include "train/metrics.h"
#include "train/run_models.h"
#include "train/train_step.h"
#include "train/trainer.h"
#include "pipelines/mtp_pipeline.h"
#include "pipelines/verifiable_pipeline.h"
#include "verifiable_reference.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 12;  // the ASSERTs on the weights' spread hold for it (counter-based init; not for 7)
constexpr int kGlobalBatch = 24;
constexpr int kMicro = 2;
constexpr int kSteps = 3;
constexpr int kValSequences = 12;  // validation micro-batches of 1: the same at every world size

const char* kVerifiableToml = R"(
[verifiable]
critic = "unused-by-this-test.h5"
td_lambda = 0.9
initial_value = 0.5
beta = 0.8
weight_clip_min = 0.2
weight_clip_max = 2.5
td_ema_momentum = 0.3
td_ema_warmup_steps = 2
)";

TdWeightConfig weight_config() {
  TdWeightConfig c;
  c.td_lambda = 0.9;
  c.initial_value = 0.5;
  c.beta = 0.8;
  c.weight_clip_min = 0.2;
  c.weight_clip_max = 2.5;
  c.td_ema_momentum = 0.3;
  c.td_ema_warmup_steps = 2;
  return c;
}

OptimizerConfig optimizer() {
  OptimizerConfig c;
  // eps 1e-5 (not 1e-8): AdamW moves every element by ~lr whatever its gradient, so an element whose
  // gradient is a cancellation near zero turns fp32 summation-order noise into update noise; measured
  // here, the first-step gradients agree within 1e-6 of each tensor's largest entry at np 1-4, yet
  // with eps 1e-8 a [2, 1] lora_B whose second entry has gradient -1.4e-7 ends 2e-5 apart (its max
  // is 2e-4). With eps 1e-5 such elements move in proportion to their gradient: worst 5.4e-6.
  c.lr = 2e-4;
  c.betas = {0.9, 0.95};
  c.eps = 1e-5;
  c.weight_decay = 0.1;
  c.max_grad_norm = 1.0;
  return c;
}

ShardingConfig fp32_sharding(const std::string& strategy) {
  ShardingConfig c;
  set_config(c, "strategy=" + strategy);
  c.param_dtype = at::kFloat;
  c.reduce_dtype = at::kFloat;
  return c;
}

ModelSpec policy_spec(bool lora) {
  ModelSpec s;
  s.role = "policy";
  s.args = tiny_mtp_args();
  if (lora) s.lora = tiny_lora();
  return s;
}

// A next-token backbone with an mlp value head (dropout set, so eval mode must switch it off).
ModelSpec critic_spec(bool lora) {
  ModelSpec s;
  s.role = "critic";
  s.args.dim = 16;
  s.args.n_layers = 2;
  s.args.n_heads = 4;
  s.args.n_kv_heads = 2;
  s.args.vocab_size = tiny_mtp_args().vocab_size;
  s.args.multiple_of = 8;
  s.args.n_future_tokens = 1;
  s.args.max_seq_len = 32;
  s.value_head.enabled = true;
  s.value_head.type = ValueHeadType::Mlp;
  s.value_head.dropout = 0.3;
  s.value_head.bias_init = 0.5;
  if (lora) {
    s.lora.enabled = true;
    s.lora.rank = 2;
    s.lora.alpha = 4.0;
    s.lora.targets = {"wq", "wv", "w2"};
  }
  s.frozen = true;
  return s;
}

// The critic's weights: the seeded init with a random last value layer and random LoRA B (both are
// zero at init, which would make every value 0.5 and every adapter a no-op).
std::unordered_map<std::string, at::Tensor> critic_weights(const MtpModel& m) {
  auto w = m.init_params(kSeed + 1);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(kSeed + 2);
  for (auto& [fqn, t] : w)
    if (fqn == "value_head.mlp.6.weight" || fqn.find("lora_B") != std::string::npos)
      t = at::randn(t.sizes(), g) * (fqn[0] == 'v' ? 2.0 : 0.3);
  return w;
}

MicroBatch micro_batch(const MtpBatch& b) {
  MicroBatch mb;
  mb.batch.tokens = b.tokens;
  mb.batch.labels = b.labels;
  mb.batch.attention_mask = b.tokens.ne(0).to(at::kLong);
  mb.batch.is_correct = at::ones({b.tokens.size(0)}, at::kFloat);
  mb.batch.n_label_tokens = b.labels.ne(-100).sum().item<int64_t>();
  mb.batch.sample_index.assign(size_t(b.tokens.size(0)), 0);
  return mb;
}

std::vector<double> sum_over_ranks(std::vector<double> v, MPI_Op op = MPI_SUM) {
  if (!v.empty()) MPI_Allreduce(MPI_IN_PLACE, v.data(), int(v.size()), MPI_DOUBLE, op, mpi().world());
  return v;
}

std::vector<Sequence> val_sequences() {
  return global_batch(kSeed + 100, 0, kValSequences, tiny_mtp_args().vocab_size);
}

struct Result {
  std::vector<double> losses, norms, unweighted, td_mean, td_std, ema_mean, ema_std, w_mean, w_std, w_min, w_max,
      w_entropy, clip_ratio, value_mse;
  double val_weighted = 0, val_unweighted = 0;
  std::unordered_map<std::string, at::Tensor> first_grads;  // step 0, before clipping
  std::unordered_map<std::string, at::Tensor> params;       // after the last step
};

Result engine_run(bool policy_lora, bool critic_lora, const std::string& strategy = "full_shard", int steps = kSteps) {
  Communicator& comm = world_comm();
  const int rank = comm.rank(), world = comm.size();
  const ShardingConfig sc = fp32_sharding(strategy);
  const std::unique_ptr<ShardGroups> groups = is_hybrid(sc.strategy)
                                                  ? shard_groups(mpi().world(), hybrid_test_group_size(world))
                                                  : nullptr;
  const c10::Device cpu(c10::kCPU);
  ModelHandle policy = build_model(policy_spec(policy_lora), comm, sc, kSeed, cpu, groups.get());
  ModelHandle critic = build_model(critic_spec(critic_lora), comm, sc, kSeed + 1, cpu, groups.get());
  critic.engine->load_full(critic_weights(*critic.model));

  TrainerConfigs cfg;
  cfg.model.sequential_unembedding = true;
  MtpPolicyPipeline pipe(std::make_unique<VerifiableWeighting>());
  ConfigSet set;
  pipe.add_config(set);
  set.load_string(kVerifiableToml, "test");
  const Logger log = mpi().logger();
  RunContext ctx;
  ctx.settings = pipeline_settings(cfg);
  ctx.comm = &comm;
  ctx.world = mpi().world();
  ctx.log = &log;
  ctx.trained = &policy;
  ctx.frozen = {&critic};
  pipe.attach(ctx);
  ShardedAdamW opt(*policy.engine, optimizer());

  Result r;
  for (int s = 0; s < steps; ++s) {
    std::vector<MicroBatch> mbs;
    for (const MtpBatch& b :
         rank_micro_batches(global_batch(kSeed, s, kGlobalBatch, tiny_mtp_args().vocab_size), rank, world, kMicro))
      mbs.push_back(micro_batch(b));
    const BatchGeometry geo{kGlobalBatch, kGlobalBatch / (kMicro * world), world, rank};  // kMicro micro-batches
    StepContext step_ctx{s, steps, &geo, LossNormalization::Global};
    TrainStepOptions options;
    if (s == 0)
      options.after_backward = [&] {
        policy.engine->reduce_gradients();
        r.first_grads = policy.engine->full_grads();
      };
    // The trainer's own step; lr factor 1: the optimizer's lr, as the reference.
    const TrainStepResult step = train_step(pipe, mbs, opt, comm, step_ctx, 1.0, options);
    EXPECT_TRUE(step.applied) << "step " << s;
    r.norms.push_back(step.grad_norm);
    r.losses.push_back(step.loss);
    const MetricsRecord& rec = step.rec;
    EXPECT_EQ(rec.get("train/weighted_ce_loss"), r.losses.back());
    r.unweighted.push_back(rec.get("train/unweighted_ce_loss"));
    EXPECT_NEAR(rec.get("train/loss_ratio"), r.losses.back() / r.unweighted.back(), 1e-12);
    for (auto [key, out] :
         std::vector<std::pair<const char*, std::vector<double>*>>{{"td/mean", &r.td_mean},
                                                                   {"td/std", &r.td_std},
                                                                   {"td/ema_mean", &r.ema_mean},
                                                                   {"td/ema_std", &r.ema_std},
                                                                   {"weight/mean", &r.w_mean},
                                                                   {"weight/std", &r.w_std},
                                                                   {"weight/min", &r.w_min},
                                                                   {"weight/max", &r.w_max},
                                                                   {"weight/entropy", &r.w_entropy},
                                                                   {"weight/clipping_ratio", &r.clip_ratio},
                                                                   {"value/mse", &r.value_mse}}) {
      EXPECT_TRUE(rec.has(key)) << key;
      out->push_back(rec.get(key));
    }
  }
  r.params = policy.engine->full_params();

  // validation: this rank's sequences, one per micro-batch
  const std::vector<Sequence> val = val_sequences();
  NamedStats local;
  for (int i = rank; i < kValSequences; i += world)
    local.accumulate(pipe.eval_batch(micro_batch(make_batch({val[i]}))));
  NamedStats global = local;
  global.sum = sum_over_ranks(local.sum);
  MetricsRecord rec;
  const double val_loss = pipe.finish_eval(global, rec);
  r.val_weighted = rec.get("val/weighted_ce_loss");
  r.val_unweighted = rec.get("val/unweighted_ce_loss");
  EXPECT_EQ(val_loss, r.val_unweighted);
  EXPECT_EQ(rec.get("val/loss"), r.val_unweighted);
  return r;
}

// ---- single process, plain LibTorch, weights in double here

std::vector<double> row(const at::Tensor& t2d, int64_t b) {
  at::Tensor r = t2d[b].to(at::kDouble).contiguous();
  return std::vector<double>(r.data_ptr<double>(), r.data_ptr<double>() + r.numel());
}
std::vector<int64_t> row_labels(const at::Tensor& labels, int64_t b) {
  at::Tensor r = labels[b].contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

struct Weighed {
  at::Tensor weights;       // [B, S] float
  std::vector<double> adv;  // valid advantages
  std::vector<double> w;    // valid weights
  std::vector<double> vse;  // valid (v - 1)^2
  double clipped = 0;
};

// mean/sd: whitening statistics; batch_stats: use the batch's own (validation).
Weighed weigh(const at::Tensor& values, const at::Tensor& labels, const TdWeightConfig& c, double mean, double sd,
              bool batch_stats) {
  Weighed out;
  const int64_t B = labels.size(0), S = labels.size(1);
  std::vector<std::vector<double>> adv;
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t> lab = row_labels(labels, b);
    adv.push_back(reference_gae(row(values, b), lab, c.td_lambda, c.initial_value));
    for (int64_t t = 0; t < S; ++t)
      if (lab[t] != -100) out.adv.push_back(adv[b][t]);
  }
  bool uniform = false;
  if (batch_stats) {
    uniform = out.adv.size() <= 1;
    if (!uniform) mean_and_std(out.adv, &mean, &sd);
  }
  out.weights = at::zeros({B, S}, at::kFloat);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<double> v = row(values, b);
    for (int64_t t = 0; t < S; ++t) {
      if (labels[b][t].item<int64_t>() == -100) continue;
      const double w = uniform ? 1.0 : reference_weight(adv[b][t], mean, sd, c);
      out.clipped += uniform ? 0 : reference_clipped(adv[b][t], mean, sd, c);
      out.weights[b][t] = w;
      out.w.push_back(w);
      out.vse.push_back((v[t] - 1) * (v[t] - 1));
    }
  }
  return out;
}

std::vector<double> to_double(const std::vector<int64_t>& v) { return std::vector<double>(v.begin(), v.end()); }

double head_mean(const std::vector<double>& sums, const std::vector<double>& counts) {
  double total = 0;
  int n = 0;
  for (size_t k = 0; k < sums.size(); ++k)
    if (counts[k] > 0) total += sums[k] / counts[k], ++n;
  return total / n;
}

Result reference_run(bool policy_lora, bool critic_lora, int steps = kSteps) {
  const TdWeightConfig c = weight_config();
  const ModelSpec ps = policy_spec(policy_lora), cs = critic_spec(critic_lora);
  MtpModel policy(ps.args, ps.lora);
  MtpModel critic(cs.args, cs.lora, cs.value_head);
  std::vector<ParamSpec> critic_specs = critic.param_specs();
  for (auto& p : critic_specs) p.trainable = false;
  LocalParams local(policy.param_specs(), policy.init_params(kSeed));
  LocalParams critic_local(critic_specs, critic_weights(critic));
  TorchAdamW opt(local, optimizer());
  MtpPassOptions so;
  so.sequential_unembedding = false;
  auto values_of = [&](const at::Tensor& tokens) {
    c10::NoGradGuard ng;
    return critic.forward_values(critic_local, tokens, ForwardOptions{});
  };
  ReferenceEma ema;
  Result r;
  for (int s = 0; s < steps; ++s) {
    const MtpBatch b = make_batch(global_batch(kSeed, s, kGlobalBatch, policy.args().vocab_size));
    const Weighed w = weigh(values_of(b.tokens), b.labels, c, ema.mean, ema.sd, false);
    opt.zero_grad();
    const std::vector<double> counts = to_double(count_valid_targets(b.labels, policy.n_future()));
    MtpPassResult res = mtp_forward_backward(policy, local, MtpBatch{b.tokens, b.labels, w.weights}, counts, so);
    r.losses.push_back(res.loss);
    r.unweighted.push_back(head_mean(res.unweighted_sum, counts));
    if (s == 0)
      for (const ParamSpec& p : policy.param_specs())
        if (p.trainable) r.first_grads[p.fqn] = local.param(p.fqn).grad().clone();
    r.norms.push_back(opt.clip_and_step());
    ema.update(w.adv, c.td_ema_momentum, c.td_ema_warmup_steps);
    double m, sd;
    mean_and_std(w.adv, &m, &sd);
    r.td_mean.push_back(m);
    r.td_std.push_back(sd);
    r.ema_mean.push_back(ema.mean);
    r.ema_std.push_back(ema.sd);
    mean_and_std(w.w, &m, &sd);
    r.w_mean.push_back(m);
    r.w_std.push_back(sd);
    r.w_min.push_back(*std::min_element(w.w.begin(), w.w.end()));
    r.w_max.push_back(*std::max_element(w.w.begin(), w.w.end()));
    double ent = 0, vse = 0;
    for (double x : w.w) ent += -x * std::log(x + 1e-10);
    for (double x : w.vse) vse += x;
    r.w_entropy.push_back(ent / w.w.size());
    r.clip_ratio.push_back(w.clipped / w.w.size());
    r.value_mse.push_back(vse / w.w.size());
  }
  for (const ParamSpec& p : policy.param_specs()) r.params[p.fqn] = local.param(p.fqn).detach().clone();

  std::vector<double> wsum(policy.n_future(), 0.0), usum(policy.n_future(), 0.0), cnt(policy.n_future(), 0.0);
  for (const Sequence& seq : val_sequences()) {
    const MtpBatch b = make_batch({seq});
    const Weighed w = weigh(values_of(b.tokens), b.labels, c, 0, 1, true);
    MtpPassResult res = mtp_forward_loss(policy, local, MtpBatch{b.tokens, b.labels, w.weights}, so);
    for (int64_t k = 0; k < policy.n_future(); ++k) {
      wsum[k] += res.weighted_sum[k];
      usum[k] += res.unweighted_sum[k];
      cnt[k] += double(res.count[k]);
    }
  }
  r.val_weighted = head_mean(wsum, cnt);
  r.val_unweighted = head_mean(usum, cnt);
  return r;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " step " << i;
}

TEST(VerifiablePipeline, ShardedStepsEqualSingleProcess) {
  for (bool policy_lora : {false, true})
    for (bool critic_lora : {false, true}) {
      if (!policy_lora && critic_lora) continue;  // three combinations keep the test short
      const std::string what = std::string(policy_lora ? "LoRA" : "full") + " policy, critic" +
                               (critic_lora ? " with LoRA" : "");
      const Result want = reference_run(policy_lora, critic_lora);
      const Result got = engine_run(policy_lora, critic_lora);
      // The weights must be far from uniform, or the test would not see them.
      ASSERT_GT(want.w_std[0], 0.2) << what;
      ASSERT_GT(want.clip_ratio[1], 0.0) << what;
      expect_close(got.losses, want.losses, 1e-5, what + " loss");
      expect_close(got.norms, want.norms, 1e-5, what + " grad norm");
      expect_close(got.unweighted, want.unweighted, 1e-5, what + " unweighted CE");
      std::string worst;
      EXPECT_LE(rel_diff(got.first_grads, want.first_grads, &worst), 1e-5) << what << ": worst gradient " << worst;
      worst.clear();
      EXPECT_LE(rel_diff(got.params, want.params, &worst), 1e-5) << what << ": worst parameter " << worst;
      for (auto [g, w, name] :
           std::vector<std::tuple<const std::vector<double>*, const std::vector<double>*, const char*>>{
               {&got.td_mean, &want.td_mean, "td/mean"},
               {&got.td_std, &want.td_std, "td/std"},
               {&got.ema_mean, &want.ema_mean, "td/ema_mean"},
               {&got.ema_std, &want.ema_std, "td/ema_std"},
               {&got.w_mean, &want.w_mean, "weight/mean"},
               {&got.w_std, &want.w_std, "weight/std"},
               {&got.w_min, &want.w_min, "weight/min"},
               {&got.w_max, &want.w_max, "weight/max"},
               {&got.w_entropy, &want.w_entropy, "weight/entropy"},
               {&got.clip_ratio, &want.clip_ratio, "weight/clipping_ratio"},
               {&got.value_mse, &want.value_mse, "value/mse"}})
        expect_close(*g, *w, 1e-5, what + " " + name);
      EXPECT_NEAR(got.val_weighted, want.val_weighted, 1e-5 * want.val_weighted) << what;
      EXPECT_NEAR(got.val_unweighted, want.val_unweighted, 1e-5 * want.val_unweighted) << what;
      EXPECT_NE(want.val_weighted, want.val_unweighted) << what;
    }
}

// Hybrid sharding (2 x 2 at np 4, groups of one below; the frozen critic's shards in the groups
// too), LoRA policy and critic: 10 steps equal the single process and full_shard at the same world
// size within 1e-5.
TEST(VerifiablePipeline, HybridEqualsFullShardAndSingleProcessOver10Steps) {
  constexpr int kLongSteps = 10;
  const Result want = reference_run(true, true, kLongSteps);
  const Result hybrid = engine_run(true, true, "hybrid_shard", kLongSteps);
  const Result full = engine_run(true, true, "full_shard", kLongSteps);
  for (const auto& [got, what] :
       {std::make_pair(&hybrid, std::string("hybrid_shard")), std::make_pair(&full, std::string("full_shard"))}) {
    expect_close(got->losses, want.losses, 1e-5, what + " loss");
    expect_close(got->norms, want.norms, 1e-5, what + " grad norm");
    expect_close(got->w_mean, want.w_mean, 1e-5, what + " weight/mean");
    std::string worst;
    EXPECT_LE(rel_diff(got->params, want.params, &worst), 1e-5) << what << ": worst parameter " << worst;
  }
  expect_close(hybrid.losses, full.losses, 1e-5, "hybrid vs full_shard loss");
  std::string worst;
  EXPECT_LE(rel_diff(hybrid.params, full.params, &worst), 1e-5) << "hybrid vs full_shard: worst parameter " << worst;
}

}  // namespace
}  // namespace wmtp::test
