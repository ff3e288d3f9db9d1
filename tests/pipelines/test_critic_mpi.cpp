// train-critic's step sharded over np 1-4 equals the single-process step (fp32): the CriticPipeline
// stepped by the trainer's own train_step (train/train_step.h) over this rank's pairs
// items[rank::world] in micro-batches of 2 pairs, against plain LibTorch — LocalParams, the whole global batch of 24 pairs as ONE [48, S] forward,
// torch::optim::AdamW with the same parameter groups. Pairs have prompts, right padding, sequences
// cut at max_length and a correct solution fully cut off (no solution token). Variants: frozen
// backbone (value head only) with the pairwise loss; LoRA + value head with the λ-return loss
// (Huber, λ decaying over the steps); a fully trained backbone with activation checkpointing.
// Then the trained critic is saved, rebuilt from the file alone (model_spec_from_checkpoint reads
// /value_head) as a frozen model, and its values equal the reference's; so do those of the LoRA
// critic merged by merge-lora (no /value_head: the head is recognized from its tensors).
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <random>

#include "../shard/shard_test_util.h"
#include "../shard/torch_reference.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/lora_merge.h"
#include "comm/mpi_communicator.h"
#include "model/local_params.h"
#include "model/mtp.h"
#include "rel_diff.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "test_util.h"
#include "pipelines/critic_pipeline.h"
#include "train/run_models.h"
#include "train/train_checkpoint.h"
#include "train/train_step.h"
#include "train/trainer.h"

namespace wmtp::test {
namespace {

constexpr uint64_t kSeed = 11;
constexpr int kPairs = 24;  // per step: 2-pair micro-batches x accumulation 12/6/4/3 at np 1/2/3/4
constexpr int kMicro = 2;
constexpr int kSteps = 3;
constexpr int64_t kVocab = 37;
constexpr int64_t kMaxLen = 14;

MpiCommunicator& comm() {
  static MpiCommunicator c(mpi().world());
  return c;
}

// Tokens of one solution attempt: prompt (shared by the pair), then the solution.
struct Seq {
  std::vector<int64_t> tokens;
  int64_t prompt = 0;
};
struct Pair {
  Seq pos, neg;
};

// The global batch of `step`, the same on every rank.
std::vector<Pair> global_pairs(int step) {
  std::mt19937_64 rng(kSeed * 1000 + uint64_t(step));
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<Pair> out;
  for (int i = 0; i < kPairs; ++i) {
    Pair p;
    const int64_t prompt = uni(1, 5);
    std::vector<int64_t> head;
    for (int64_t t = 0; t < prompt; ++t) head.push_back(uni(1, kVocab - 1));
    for (Seq* s : {&p.pos, &p.neg}) {
      s->prompt = prompt;
      s->tokens = head;
      const int64_t total = (i % 5 == 1) ? kMaxLen : uni(prompt + 1, kMaxLen);  // some cut at max_length
      while (int64_t(s->tokens.size()) < total) s->tokens.push_back(uni(1, kVocab - 1));
    }
    if (i % 7 == 3) p.pos.prompt = int64_t(p.pos.tokens.size());  // prompt fills it: no solution token
    out.push_back(p);
  }
  return out;
}

Batch make_batch(const std::vector<const Seq*>& seqs, int64_t S) {
  const int64_t B = int64_t(seqs.size());
  Batch b;
  b.tokens = at::zeros({B, S}, at::kLong);
  b.labels = at::full({B, S}, -100, at::kLong);
  b.attention_mask = at::zeros({B, S}, at::kLong);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t t = 0; t < int64_t(seqs[size_t(i)]->tokens.size()); ++t) {
      b.tokens[i][t] = seqs[size_t(i)]->tokens[size_t(t)];
      b.attention_mask[i][t] = 1;
      if (t >= seqs[size_t(i)]->prompt) b.labels[i][t] = seqs[size_t(i)]->tokens[size_t(t)];
    }
  b.is_correct = at::ones({B}, at::kFloat);
  return b;
}

// Pairs padded to their own longest sequence (as collate_pairs pads a micro-batch).
MicroBatch make_micro(const std::vector<Pair>& pairs) {
  std::vector<const Seq*> pos, neg;
  int64_t S = 0;
  for (const Pair& p : pairs) {
    pos.push_back(&p.pos), neg.push_back(&p.neg);
    S = std::max<int64_t>({S, int64_t(p.pos.tokens.size()), int64_t(p.neg.tokens.size())});
  }
  MicroBatch mb;
  mb.batch = make_batch(pos, S);
  mb.neg = make_batch(neg, S);
  return mb;
}

std::vector<MicroBatch> rank_micro_batches(const std::vector<Pair>& global, int rank, int world) {
  std::vector<Pair> mine;
  for (size_t i = size_t(rank); i < global.size(); i += size_t(world)) mine.push_back(global[i]);
  std::vector<MicroBatch> out;
  for (size_t i = 0; i < mine.size(); i += kMicro)
    out.push_back(make_micro(std::vector<Pair>(mine.begin() + long(i), mine.begin() + long(i + kMicro))));
  return out;
}

struct Variant {
  std::string name;
  bool lora = false;
  bool backbone_frozen = true;
  CriticLoss loss = CriticLoss::Pairwise;
  bool checkpointing = false;
};

TrainerConfigs make_configs(const Variant& v) {
  TrainerConfigs cfg;
  cfg.model.dim = 16;
  cfg.model.n_layers = 3;  // 2 trunk blocks + head 0
  cfg.model.n_heads = 4;
  cfg.model.n_kv_heads = 2;
  cfg.model.vocab_size = kVocab;
  cfg.model.multiple_of = 8;
  cfg.model.n_future_tokens = 1;
  cfg.model.max_seq_len = 32;
  cfg.model.activation_checkpointing = v.checkpointing;
  cfg.lora.enabled = v.lora;
  cfg.lora.rank = 2;
  cfg.lora.alpha = 4.0;
  cfg.lora.targets = {"wq", "wv", "w2"};
  cfg.optimizer.lr = 1e-3;
  cfg.optimizer.weight_decay = 0.1;
  cfg.optimizer.max_grad_norm = 0.5;
  cfg.sharding.param_dtype = at::kFloat;
  cfg.sharding.reduce_dtype = at::kFloat;
  return cfg;
}

void configure_pipeline(CriticPipeline& p, const Variant& v) {
  CriticConfig& c = p.config();
  c.loss.type = v.loss;
  c.loss.loss_fn = CriticTokenLoss::Huber;
  // Both smooth-L1 branches occur. (With beta below |bias_init - R| for every token, each token's
  // gradient is exactly ±1 at step 0 and the value head's bias gradient nearly cancels between pos
  // and neg: AdamW then turns rounding noise into a full-size update.)
  c.loss.huber_delta = 0.5;
  c.loss.gamma = 0.98;
  c.loss.lambda_schedule = LambdaSchedule::Linear;  // λ = 1.0, 0.9, 0.8 at steps 0, 1, 2
  c.loss.lambda_start = 1.0, c.loss.lambda_end = 0.8, c.loss.lambda_warmup_steps = 0, c.loss.lambda_decay_steps = 2;
  c.backbone_frozen = v.backbone_frozen;
  c.value_head_dropout = 0.0;  // randomness cannot match across world sizes
  c.value_head_bias_init = 0.25;
  // Small enough that AdamW's per-element normalization does not lift fp32 summation-order noise
  // (different micro-batching) above 1e-5 after 3 steps; see tests/shard/test_mtp_equivalence.cpp.
  c.value_head_lr = 1e-3;
  c.lora_lr = 5e-4;
  c.value_head_weight_decay = 0.05;
  c.lora_weight_decay = 0.0;
}

struct Reference {
  std::vector<double> losses;
  std::unordered_map<std::string, at::Tensor> params;
  at::Tensor values;  // of the last step's batch, after training (no dropout: deterministic)
};

at::Tensor cat_pairs(const MicroBatch& mb, at::Tensor Batch::*field) {
  return at::cat({mb.batch.*field, mb.neg.*field}, 0);
}

Reference reference_run(const ModelSpec& spec, const CriticConfig& cc, const OptimizerConfig& oc, int steps = kSteps) {
  MtpModel model(spec.args, spec.lora, spec.value_head, spec.freeze_base);
  LocalParams local(model.param_specs(), model.init_params(kSeed));
  TorchAdamW opt(local, oc);
  Reference r;
  for (int s = 0; s < steps; ++s) {
    const MicroBatch all = make_micro(global_pairs(s));
    const at::Tensor tokens = cat_pairs(all, &Batch::tokens), labels = cat_pairs(all, &Batch::labels);
    const at::Tensor attention = cat_pairs(all, &Batch::attention_mask);
    opt.zero_grad();
    at::Tensor values = model.forward_values(local, tokens, ForwardOptions{true, false});
    const double lam = cc.loss.pairwise() ? 1.0 : scheduled_lambda(cc.loss, s);
    at::Tensor loss = critic_loss(critic_loss_terms(values, labels, attention, cc.loss, lam), cc.loss,
                                  critic_local_counts(labels));
    loss.backward();
    r.losses.push_back(loss.item<double>());
    opt.clip_and_step();
  }
  for (const ParamSpec& s : model.param_specs()) r.params[s.fqn] = local.param(s.fqn).detach().clone();
  const MicroBatch last = make_micro(global_pairs(steps - 1));
  c10::NoGradGuard no_grad;
  r.values = model.forward_values(local, cat_pairs(last, &Batch::tokens), ForwardOptions{});
  return r;
}

// `steps` steps of the pipeline on `h` (this rank's pairs, the trainer's own train_step; lr factor
// 1: the configured rates, as the reference); the step losses.
std::vector<double> train_critic(ModelHandle& h, const TrainerConfigs& cfg, CriticPipeline& pipeline, int steps,
                                 const std::string& what) {
  const int rank = mpi().rank(), world = mpi().world_size();
  RunContext ctx;
  ctx.settings = pipeline_settings(cfg);
  ctx.comm = &comm();
  ctx.world = mpi().world();
  ctx.trained = &h;
  pipeline.attach(ctx);
  ShardedAdamW opt(*h.engine, cfg.optimizer);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    std::vector<MicroBatch> mbs = rank_micro_batches(global_pairs(s), rank, world);
    const BatchGeometry geo{kPairs, kMicro, world, rank};
    EXPECT_EQ(int64_t(mbs.size()), geo.accumulation_steps());
    StepContext step_ctx{s, steps, &geo, LossNormalization::Global};
    const TrainStepResult step = train_step(pipeline, mbs, opt, comm(), step_ctx, 1.0);
    EXPECT_TRUE(step.applied) << what << " step " << s;
    losses.push_back(step.loss);
  }
  return losses;
}

void run_variant(const Variant& v) {
  const int rank = mpi().rank(), world = mpi().world_size();
  TrainerConfigs cfg = make_configs(v);
  CriticPipeline pipeline;
  configure_pipeline(pipeline, v);
  configure_run(cfg, pipeline);  // fills [optimizer] group_* from [critic]
  const ModelSpec spec = pipeline.trained_model(pipeline_settings(cfg), kVocab);
  ASSERT_EQ(spec.args.n_future_tokens, 1);
  const Reference ref = reference_run(spec, pipeline.config(), cfg.optimizer);

  ModelHandle h = build_model(spec, comm(), cfg.sharding, kSeed);
  const std::vector<double> losses = train_critic(h, cfg, pipeline, kSteps, v.name);
  for (int s = 0; s < kSteps; ++s)
    EXPECT_NEAR(losses[size_t(s)], ref.losses[size_t(s)], 1e-5 * std::abs(ref.losses[size_t(s)]))
        << v.name << " step " << s;
  std::string worst_name;
  const double worst = rel_diff(h.engine->full_params(), ref.params, &worst_name);
  EXPECT_LE(worst, 1e-5) << v.name << ": worst parameter " << worst_name;
  if (rank == 0)
    std::printf("%s np %d: worst parameter difference %.2e (%s)\n", v.name.c_str(), world, worst, worst_name.c_str());
  EXPECT_GT(rel_diff(ref.params.at("value_head.mlp.6.weight"),
                     at::zeros_like(ref.params.at("value_head.mlp.6.weight"))),
            0)
      << "the value head trained";

  // Saved, then rebuilt from the file alone as a frozen critic: the same values as the reference.
  const std::string dir_path = shared_scratch_dir("critic_" + v.name + "_np" + std::to_string(mpi().world_size()),
                                                  mpi().world());
  CheckpointDir dir(dir_path, mpi().world());
  const LoraRecord lora = lora_record_for(cfg.lora, "", "");
  const TrainedModelState saved(h, v.lora ? &lora : nullptr, /*adapters_only=*/false);
  const std::string path = save_training_checkpoint(dir, 0, mpi().world(), saved.header(kSteps), {&saved});
  ModelSpec back = model_spec_from_checkpoint("critic", path);
  EXPECT_TRUE(back.value_head.enabled);
  EXPECT_EQ(back.value_head.type, ValueHeadType::Mlp);
  EXPECT_EQ(back.value_head.bias_init, 0.25);
  EXPECT_EQ(back.args.n_future_tokens, 1);
  EXPECT_EQ(back.lora.enabled, v.lora);
  ModelHandle frozen = build_model(back, comm(), cfg.sharding, /*seed=*/999);
  load_model_weights(frozen, mpi().world());
  const MicroBatch last = make_micro(global_pairs(kSteps - 1));
  c10::NoGradGuard no_grad;
  at::Tensor values = frozen.model->forward_values(*frozen.engine, cat_pairs(last, &Batch::tokens), ForwardOptions{});
  EXPECT_LE(rel_diff(values, ref.values), 1e-5) << v.name;
  if (!v.lora) return;

  // merge-lora keeps the head's tensors but not /value_head: the merged critic is still recognized.
  MergeOptions mo;
  mo.base = path;
  mo.output = dir.dir() + "/merged.h5";
  EXPECT_GT(merge_lora_weights(mo, mpi().world()), 0);
  ModelSpec merged = model_spec_from_checkpoint("critic", mo.output);
  EXPECT_TRUE(merged.value_head.enabled);
  EXPECT_EQ(merged.value_head.type, ValueHeadType::Mlp);
  EXPECT_FALSE(merged.lora.enabled);
  ModelHandle mm = build_model(merged, comm(), cfg.sharding, /*seed=*/998);
  load_model_weights(mm, mpi().world());
  at::Tensor mv = mm.model->forward_values(*mm.engine, cat_pairs(last, &Batch::tokens), ForwardOptions{});
  EXPECT_LE(rel_diff(mv, ref.values), 1e-5) << "merged";
}

TEST(CriticMpi, FrozenBackbonePairwiseEqualsSingleProcess) {
  run_variant({"frozen_pairwise", false, true, CriticLoss::Pairwise, false});
}

TEST(CriticMpi, LoraLambdaReturnEqualsSingleProcess) {
  run_variant({"lora_lambda", true, true, CriticLoss::LambdaReturn, false});
}

TEST(CriticMpi, FullBackboneWithCheckpointingEqualsSingleProcess) {
  run_variant({"full_ckpt", false, false, CriticLoss::Pairwise, true});
}

// Hybrid sharding (2 x 2 at np 4, groups of one below; the frozen base's shards in the groups too),
// LoRA + value head with the λ-return loss: 10 steps equal the single process and full_shard at the
// same world size within 1e-5.
TEST(CriticMpi, HybridEqualsFullShardAndSingleProcessOver10Steps) {
  constexpr int kLongSteps = 10;
  const Variant v{"lora_lambda", true, true, CriticLoss::LambdaReturn, false};
  std::unordered_map<std::string, std::vector<double>> losses;
  std::unordered_map<std::string, std::unordered_map<std::string, at::Tensor>> params;
  Reference ref;
  for (std::string strategy : {"full_shard", "hybrid_shard"}) {
    TrainerConfigs cfg = make_configs(v);
    set_config(cfg.sharding, "strategy=" + strategy);
    CriticPipeline pipeline;
    configure_pipeline(pipeline, v);
    configure_run(cfg, pipeline);
    const ModelSpec spec = pipeline.trained_model(pipeline_settings(cfg), kVocab);
    if (strategy == "full_shard") ref = reference_run(spec, pipeline.config(), cfg.optimizer, kLongSteps);
    const std::unique_ptr<ShardGroups> groups = is_hybrid(cfg.sharding.strategy)
                                                    ? shard_groups(mpi().world(),
                                                                   hybrid_test_group_size(mpi().world_size()))
                                                    : nullptr;
    ModelHandle h = build_model(spec, comm(), cfg.sharding, kSeed, c10::Device(c10::kCPU), groups.get());
    losses[strategy] = train_critic(h, cfg, pipeline, kLongSteps, strategy);
    params[strategy] = h.engine->full_params();
    for (int s = 0; s < kLongSteps; ++s)
      EXPECT_NEAR(losses[strategy][size_t(s)], ref.losses[size_t(s)], 1e-5 * std::abs(ref.losses[size_t(s)]))
          << strategy << " step " << s;
    std::string worst;
    EXPECT_LE(rel_diff(params[strategy], ref.params, &worst), 1e-5) << strategy << ": worst parameter " << worst;
  }
  for (int s = 0; s < kLongSteps; ++s)
    EXPECT_NEAR(losses["hybrid_shard"][size_t(s)], losses["full_shard"][size_t(s)],
                1e-5 * std::abs(losses["full_shard"][size_t(s)]))
        << "hybrid vs full_shard step " << s;
  std::string worst;
  EXPECT_LE(rel_diff(params["hybrid_shard"], params["full_shard"], &worst), 1e-5) << "hybrid vs full_shard: " << worst;
}

// Frozen backbone costs no gradient or optimizer state; a value model holds no output projection.
TEST(CriticMpi, FrozenBackboneTrainsTheValueHeadOnly) {
  Variant v{"frozen", false, true, CriticLoss::Pairwise, false};
  TrainerConfigs cfg = make_configs(v);
  CriticPipeline pipeline;
  configure_pipeline(pipeline, v);
  configure_run(cfg, pipeline);
  EXPECT_EQ(cfg.optimizer.group_patterns, std::vector<std::string>{"value_head.*"});
  configure_run(cfg, pipeline);  // idempotent (a resolved config read back)
  ModelHandle h = build_model(pipeline.trained_model(pipeline_settings(cfg), kVocab), comm(), cfg.sharding, kSeed);
  int64_t trainable = 0;
  for (const ParamSpec& s : h.model->param_specs()) {
    EXPECT_NE(s.fqn, "output.weight");
    EXPECT_EQ(s.trainable, s.unit == "value_head") << s.fqn;
    trainable += s.trainable ? s.numel() : 0;
  }
  EXPECT_EQ(h.engine->plan().trainable_numel(), trainable);
  cfg.optimizer.group_patterns = {"*norm*"};
  EXPECT_THROW(configure_run(cfg, pipeline), Error);  // the user's own groups would be silently replaced
}

}  // namespace
}  // namespace wmtp::test
