// --dry-run: plan and per-rank memory estimate for a planned world size, without MPI traffic.
//
// Activation model (bytes per micro-batch of B sequences of S tokens, compute dtype of c bytes):
//   per block without checkpointing ~ B*S*(D*(16 + 8c) + 4*F*c) + 8*B*H*S^2   (norms in fp32, q/k/v,
//   RoPE in fp32, fp32 softmax probabilities and scores, SwiGLU intermediates)
//   per block with checkpointing: its input B*S*D*c, plus one block's full set during recompute.
//   loss: sequential unembedding holds one chunk of valid rows' fp32 logits (the CE gradient is formed
//   in place; plus bf16 copies with bf16 compute); all-heads holds K heads' [B, S, V] three times.
// Plus a fixed runtime share (LibTorch, MPI, allocator slack) of 300 MiB measured on this machine.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "data/dataset.h"
#include "model/mtp.h"
#include "model/param_init.h"
#include "model/mtp_step.h"
#include "shard/memory_stats.h"
#include "shard/plan_report.h"
#include "shard/shard_plan.h"
#include "train/trainer.h"

namespace wmtp {

namespace {

struct ActivationEstimate {
  int64_t blocks = 0, loss = 0, total = 0;
};

ActivationEstimate estimate_activations(const ModelArgs& a, int64_t B, int64_t S, int64_t c, bool checkpointing,
                                        bool sequential, int64_t chunk) {
  const double D = double(a.dim), F = double(ffn_hidden_dim(a)), H = double(a.n_heads);
  const double bs = double(B) * double(S);
  const double block_full = bs * (D * (16.0 + 8.0 * double(c)) + 4.0 * F * double(c)) + 8.0 * double(B) * H * double(S) * double(S);
  const double n_blocks = double(a.n_trunk_blocks() + (sequential ? 1 : a.n_future_tokens));
  ActivationEstimate e;
  e.blocks = int64_t(checkpointing ? n_blocks * bs * D * double(c) + block_full : n_blocks * block_full);
  const double V = double(a.vocab_size);
  const double positions = sequential ? (chunk > 0 ? std::min<double>(double(chunk), double(S)) : double(S) / 4.0)
                                      : double(S) * double(a.n_future_tokens);
  // sequential: one chunk's fp32 logits, turned into their gradient in place (+ the bf16 logits and
  // gradient copies with a bf16 compute dtype); all-heads: logits, log-softmax and gradient of K heads.
  e.loss = sequential ? int64_t(double(B) * positions * V * (4.0 + (c == 2 ? 4.0 : 0.0)))
                      : int64_t(3.0 * 4.0 * double(B) * positions * V);
  e.total = e.blocks + e.loss;
  return e;
}

}  // namespace

namespace {

std::vector<ParamSpec> planned_specs(const ModelSpec& spec, const MtpModel& model) {
  std::vector<ParamSpec> specs = model.param_specs();
  if (spec.frozen)
    for (auto& p : specs) p.trainable = false;
  return specs;
}

}  // namespace

void print_dry_run(TrainerConfigs cfg, const Pipeline& pipeline, int world_size, const Logger& log) {
  if (world_size < 1) throw_usage("--world-size must be >= 1");
  configure_run(cfg, pipeline);
  int64_t data_vocab = 0;
  if (!cfg.data.train.empty() && std::filesystem::exists(cfg.data.train))
    data_vocab = Dataset::open(cfg.data.train).info().vocab_size;
  const ModelSpec trained = pipeline.trained_model(cfg, data_vocab);
  const std::vector<ModelSpec> frozen = pipeline.frozen_models(cfg, data_vocab);
  const ModelArgs& args = trained.args;
  MtpModel model(args, trained.lora, trained.value_head, trained.freeze_base);
  ShardPlan plan(planned_specs(trained, model), world_size);
  const auto& tc = cfg.training;
  const int64_t micro = tc.micro_batch_size;
  if (tc.global_batch_size % (micro * world_size) != 0)
    throw_usage("training.global_batch_size ", tc.global_batch_size, " is not a multiple of micro_batch_size ",
                micro, " x world size ", world_size);
  const int64_t accum = tc.global_batch_size / (micro * world_size);

  MemoryStats mem = estimate_memory(plan, cfg.sharding, /*with_optimizer=*/true);
  // Frozen models: their shards, and one more gathered unit at a time while they run (no grad).
  std::vector<std::pair<std::string, MemoryStats>> frozen_mem;
  std::vector<std::string> frozen_plans;
  int64_t frozen_total = 0;
  for (const ModelSpec& f : frozen) {
    MtpModel fm(f.args, f.lora, f.value_head, f.freeze_base);
    ShardPlan fplan(planned_specs(f, fm), world_size);
    MemoryStats fs = estimate_memory(fplan, cfg.sharding, /*with_optimizer=*/false);
    frozen_total += fs.frozen_bytes + fs.peak_gathered_bytes;
    frozen_mem.emplace_back(f.role + " (" + f.weights + ")", fs);
    frozen_plans.push_back(describe_plan(fplan, cfg.sharding, /*with_optimizer=*/false));
  }
  const int64_t c = cfg.sharding.param_dtype == "bf16" ? 2 : 4;
  MtpStepOptions so = mtp_step_options(cfg.model);
  ActivationEstimate act = estimate_activations(args, micro, cfg.data.max_length, c, so.activation_checkpointing,
                                                so.sequential_unembedding, so.loss_chunk_size);
  ActivationEstimate act_other = estimate_activations(args, micro, cfg.data.max_length, c, !so.activation_checkpointing,
                                                      so.sequential_unembedding, so.loss_chunk_size);
  const int64_t runtime = int64_t(300) << 20;
  const int64_t total = mem.model_state_bytes() + mem.local_grad_bytes + mem.cast_bytes + mem.peak_gathered_bytes +
                        act.total + frozen_total + runtime;
  // Start-up: each rank initialises (or loads) only its shards, through a bounded scratch buffer.
  int64_t frozen_shards = 0;
  for (const auto& fm : frozen_mem) frozen_shards += fm.second.frozen_bytes;
  const int64_t init_scratch = kInitScratchElements * 4;
  const int64_t startup = mem.model_state_bytes() + frozen_shards + init_scratch + runtime;

  if (log.rank() != 0) return;
  printf("dry run: %s, %d rank(s), strategy %s, param_dtype %s, reduce_dtype %s\n", pipeline.name().c_str(),
         world_size, cfg.sharding.strategy.c_str(), cfg.sharding.param_dtype.c_str(), cfg.sharding.reduce_dtype.c_str());
  printf("batch: global %d %s = micro %lld x accumulation %lld x %d ranks; sequences up to %lld tokens\n",
         tc.global_batch_size, cfg.data.pairwise ? "pairs" : "sequences", (long long)micro, (long long)accum,
         world_size, (long long)cfg.data.max_length);
  printf("\ntrained model: %s\n%s\n", trained.role.c_str(), describe_plan(plan, cfg.sharding, /*with_optimizer=*/true).c_str());
  for (size_t i = 0; i < frozen.size(); ++i)
    printf("frozen model: %s\n%s\n", frozen_mem[i].first.c_str(), frozen_plans[i].c_str());
  printf("per-rank memory estimate for one training step:\n");
  printf("  fp32 master shards      %12s\n", format_bytes(mem.master_bytes).c_str());
  printf("  fp32 gradient shards    %12s\n", format_bytes(mem.grad_bytes).c_str());
  printf("  AdamW state             %12s\n", format_bytes(mem.optimizer_bytes).c_str());
  printf("  frozen shards           %12s\n", format_bytes(mem.frozen_bytes).c_str());
  if (mem.local_grad_bytes) printf("  no_sync accumulators    %12s\n", format_bytes(mem.local_grad_bytes).c_str());
  if (mem.cast_bytes) printf("  param_dtype copy        %12s  (of the trainable shards, once per step)\n", format_bytes(mem.cast_bytes).c_str());
  printf("  gathered parameters     %12s  (peak, %d unit(s))\n", format_bytes(mem.peak_gathered_bytes).c_str(),
         mem.peak_gathered_units);
  for (const auto& [name, fs] : frozen_mem)
    printf("  frozen %-16s %12s  (shards %s + gathered peak %s)\n", name.substr(0, name.find(' ')).c_str(),
           format_bytes(fs.frozen_bytes + fs.peak_gathered_bytes).c_str(), format_bytes(fs.frozen_bytes).c_str(),
           format_bytes(fs.peak_gathered_bytes).c_str());
  printf("  activations             %12s  (%s activation checkpointing; %s: %s)\n",
         format_bytes(act.blocks).c_str(), so.activation_checkpointing ? "with" : "without",
         so.activation_checkpointing ? "without" : "with", format_bytes(act_other.blocks).c_str());
  printf("  loss buffers            %12s  (%s unembedding)\n", format_bytes(act.loss).c_str(),
         so.sequential_unembedding ? "sequential" : "all-heads");
  printf("  runtime (LibTorch, MPI) %12s\n", format_bytes(runtime).c_str());
  printf("  total                   %12s\n", format_bytes(total).c_str());
  printf("start-up peak per rank: %s (model state and frozen shards + %s init scratch + runtime; no rank ever holds\n"
         "  the whole model: %s in fp32)\n",
         format_bytes(startup).c_str(), format_bytes(init_scratch).c_str(),
         format_bytes(4 * (plan.trainable_numel() + plan.frozen_numel())).c_str());
  fflush(stdout);
}

}  // namespace wmtp
