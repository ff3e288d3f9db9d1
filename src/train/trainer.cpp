// Trainer: set-up (model, engine, optimizer, data, resume) and the loop. The step itself is
// train_step(): it reads top-down on one screen.
#include "train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "core/error.h"
#include "core/json.h"
#include "core/memory.h"
#include "core/timer.h"
#include "data/collate.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "dist/mpi_communicator.h"
#include "dist/mpi_env.h"
#include "model/mtp.h"
#include "model/mtp_loss.h"
#include "model/mtp_step.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "train/flops.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/signals.h"
#include "train/train_checkpoint.h"

namespace wmtp {

void register_trainer_sections(ConfigSet& set, TrainerConfigs& cfg) {
  set.add("model", cfg.model);
  set.add("data", cfg.data);
  set.add("training", cfg.training);
  set.add("optimizer", cfg.optimizer);
  set.add("lr_schedule", cfg.lr_schedule);
  set.add("sharding", cfg.sharding);
  set.add("lora", cfg.lora);
  set.add("checkpoint", cfg.checkpoint);
  set.add("logging", cfg.logging);
}

namespace {

constexpr int kExitResumeMe = 75;

// The model's vocabulary may be larger than the tokenizer's (padded embedding tables are common),
// never smaller: every token id in the data must have a row.
ModelArgs resolve_args(const ModelConfig& mc, const DatasetInfo& data) {
  ModelArgs args = resolve_model_args(mc);
  if (args.vocab_size > 0 && data.vocab_size > args.vocab_size)
    throw_usage("[model] vocab_size ", args.vocab_size, " is smaller than the tokenizer's ", data.vocab_size, " (",
                data.path, ")");
  if (args.vocab_size <= 0) resolve_vocab_size(args, data.vocab_size);
  return args;
}

}  // namespace

struct Trainer::State {
  MpiEnv& mpi;
  Logger log;
  TrainerConfigs cfg;
  Pipeline& pipeline;
  std::string config_toml;

  std::unique_ptr<MpiCommunicator> comm;
  std::unique_ptr<MtpModel> model;
  std::unique_ptr<ShardedModel> engine;
  std::unique_ptr<ShardedAdamW> opt;
  std::unique_ptr<Dataset> train_ds, valid_ds;
  std::unique_ptr<Sampler> train_sampler, valid_sampler;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<CheckpointDir> ckpt_dir;
  std::unique_ptr<MetricsLog> metrics;
  BatchGeometry geo;
  CollateOptions collate;
  MtpStepOptions step_opts;
  LoraInfo lora_info;

  int64_t accum = 1, steps_per_epoch = 0, total_steps = 0;
  int64_t step = 0;  // optimizer steps done
  DataCursor cursor;
  int64_t consumed_samples = 0;
  double peak_flops = 0;

  State(MpiEnv& m, Logger l, const TrainerConfigs& c, Pipeline& p, std::string toml)
      : mpi(m), log(std::move(l)), cfg(c), pipeline(p), config_toml(std::move(toml)) {}
};

// What one optimizer step produced, already reduced over every rank.
struct StepStats {
  double loss = 0, grad_norm = 0, lr = 0;
  double tokens = 0, flops = 0;
  std::vector<double> head_loss;  // unweighted CE per head
};

Trainer::Trainer(MpiEnv& mpi, Logger log, const TrainerConfigs& cfg, Pipeline& pipeline, std::string resolved_config)
    : s_(std::make_unique<State>(mpi, std::move(log), cfg, pipeline, std::move(resolved_config))) {
  State& s = *s_;
  const auto& tc = s.cfg.training;
  s.cfg.data.validate();
  validate_checkpoint_config(s.cfg.checkpoint);
  if (s.cfg.data.train.empty()) throw_usage("[data] train: no training dataset given (an HDF5 file from preprocess-metadata)");

  s.comm = std::make_unique<MpiCommunicator>(mpi.world());
  s.train_ds = std::make_unique<Dataset>(Dataset::open(s.cfg.data.train));
  if (!s.cfg.data.valid.empty()) s.valid_ds = std::make_unique<Dataset>(Dataset::open(s.cfg.data.valid));

  // ---- model, engine, optimizer
  ModelArgs args = resolve_args(s.cfg.model, s.train_ds->info());
  s.model = std::make_unique<MtpModel>(args, s.cfg.lora);
  s.engine = std::make_unique<ShardedModel>(s.model->param_specs(), *s.comm, s.cfg.sharding);
  s.engine->load_full(s.model->init_params(uint64_t(tc.seed)));
  s.opt = std::make_unique<ShardedAdamW>(*s.engine, s.cfg.optimizer);
  s.step_opts = mtp_step_options(s.cfg.model);
  if (!tc.init_weights.empty())
    load_training_checkpoint(tc.init_weights, s.comm->comm(), *s.model, *s.engine, nullptr, LoadPurpose::InitialWeights);
  if (s.cfg.lora.enabled) {
    s.lora_info.rank = s.cfg.lora.rank;
    s.lora_info.alpha = s.cfg.lora.alpha;
    s.lora_info.dropout = s.cfg.lora.dropout;
    s.lora_info.targets = lora_target_names(s.cfg.lora);
    s.lora_info.base_path = tc.init_weights;
  }

  // ---- data and schedule (DESIGN §7: accumulation derived for this world size)
  s.geo.global_batch_size = tc.global_batch_size;
  s.geo.micro_batch_size = tc.micro_batch_size;
  s.geo.world_size = mpi.world_size();
  s.geo.rank = mpi.rank();
  s.accum = s.geo.accumulation_steps();
  s.train_sampler = std::make_unique<Sampler>(s.train_ds->metadata(), s.cfg.data, Split::Train);
  if (s.valid_ds) s.valid_sampler = std::make_unique<Sampler>(s.valid_ds->metadata(), s.cfg.data, Split::Valid);
  s.collate = CollateOptions::from(s.cfg.data, s.train_ds->info());
  s.steps_per_epoch = s.train_sampler->steps_per_epoch(tc.global_batch_size);
  s.total_steps = tc.max_steps > 0 ? tc.max_steps
                                   : std::max<int64_t>(1, int64_t(tc.n_epochs * double(s.steps_per_epoch)));
  s.schedule = std::make_unique<LrSchedule>(s.cfg.lr_schedule, s.cfg.optimizer.lr, s.total_steps);
  s.ckpt_dir = std::make_unique<CheckpointDir>(s.cfg.checkpoint.dir, s.comm->comm());
  s.metrics = std::make_unique<MetricsLog>(tc.run_dir, mpi.rank() == 0);

  // ---- resume
  std::string resume = resolve_resume_path(s.cfg.checkpoint, s.comm->comm());
  if (!resume.empty()) {
    TrainState st = load_training_checkpoint(resume, s.comm->comm(), *s.model, *s.engine, s.opt.get(), LoadPurpose::Resume);
    s.step = st.get_int("step");
    s.cursor.epoch = st.get_int("data.epoch");
    s.cursor.position = st.get_int("data.position");
    s.consumed_samples = st.get_int_or("consumed_samples", 0);
    if (st.has("data.sampler_fingerprint") &&
        uint64_t(st.get_int("data.sampler_fingerprint")) != s.train_sampler->fingerprint())
      s.log.warn("resuming from %s with a different sample selection (data or [data] config changed): "
                 "the data cursor no longer points at the same items", resume.c_str());
    if (st.has("global_batch_size") && st.get_int("global_batch_size") != tc.global_batch_size)
      s.log.warn("resuming with global_batch_size %d (checkpoint: %lld): steps no longer map to the same batches",
                 tc.global_batch_size, (long long)st.get_int("global_batch_size"));
    s.pipeline.load_state(st);
    s.log.info("resumed from %s at step %lld (saved by %lld rank(s); now %d)", resume.c_str(), (long long)s.step,
               (long long)st.get_int_or("world_size", 0), mpi.world_size());
  }

  s.peak_flops = s.cfg.logging.peak_tflops > 0 ? s.cfg.logging.peak_tflops * 1e12 : measure_peak_flops(s.cfg.sharding.param_scalar_type(), 0.3);
  if (mpi.rank() == 0) {
    std::error_code ec;
    std::filesystem::create_directories(tc.run_dir, ec);
    std::ofstream(std::filesystem::path(tc.run_dir) / "config.toml") << s.config_toml;
  }
  const auto& plan = s.engine->plan();
  s.log.info("%s: %s", s.pipeline.name().c_str(), mpi.describe().c_str());
  s.log.info("model: dim %lld, %lld layers (%lld trunk + %lld heads), vocab %lld; %lld trainable / %lld frozen params%s",
             (long long)args.dim, (long long)args.n_layers, (long long)args.n_trunk_blocks(),
             (long long)args.n_future_tokens, (long long)args.vocab_size, (long long)plan.trainable_numel(),
             (long long)plan.frozen_numel(), s.cfg.lora.enabled ? " (LoRA)" : "");
  s.log.info("data: %lld items, %lld steps/epoch; global batch %d = micro %d x accumulation %lld x %d ranks; %lld steps",
             (long long)s.train_sampler->size(), (long long)s.steps_per_epoch, tc.global_batch_size,
             tc.micro_batch_size, (long long)s.accum, mpi.world_size(), (long long)s.total_steps);
}

Trainer::~Trainer() = default;

namespace {

MtpBatch to_mtp_batch(const Batch& b, Pipeline& p) { return MtpBatch{b.tokens, b.labels, p.token_weights(b)}; }

// ---- one optimizer step -------------------------------------------------------------------
StepStats train_step(Trainer::State& s, const StepItems& items) {
  const int64_t K = s.model->n_future();
  const int world = s.geo.world_size;

  // 1. this rank's micro-batches and their valid-target counts per head
  std::vector<Batch> batches;
  std::vector<std::vector<int64_t>> mb_counts;
  std::vector<double> reduce(size_t(2 * K + 2), 0.0);  // [loss, head sums.., head counts.., tokens]
  at::Tensor counts = at::zeros({K}, at::kDouble);
  for (const auto& mb : items.micro_batches) {
    batches.push_back(load_batch(*s.train_ds, mb, s.collate));
    mb_counts.push_back(count_valid_targets(batches.back().labels, K));
    for (int64_t k = 0; k < K; ++k) counts[k] += double(mb_counts.back()[size_t(k)]);
  }
  // 2. the step's global counts: one all-reduce (DESIGN §6)
  s.comm->all_reduce(counts, ReduceOp::Sum);
  std::vector<double> global_counts(counts.data_ptr<double>(), counts.data_ptr<double>() + K);

  // 3. forward/backward per micro-batch; gradients reduce-scattered as sums inside backward
  s.opt->zero_grad();
  at::manual_seed(uint64_t(s.cfg.training.seed) * 1000003ULL + uint64_t(s.step) * 1009ULL + uint64_t(s.geo.rank));
  double flops = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    std::vector<double> norm = global_counts;
    if (s.cfg.training.loss_normalization == "micro_batch")  // the original: mean per micro-batch, then over ranks
      for (int64_t k = 0; k < K; ++k) norm[size_t(k)] = double(mb_counts[i][size_t(k)]) * double(s.accum * world);
    MtpStepResult r = mtp_forward_backward(*s.model, *s.engine, to_mtp_batch(batches[i], s.pipeline), norm, s.step_opts);
    reduce[0] += r.loss;
    for (int64_t k = 0; k < K; ++k) {
      reduce[size_t(1 + k)] += r.unweighted_sum[size_t(k)];
      reduce[size_t(1 + K + k)] += double(r.count[size_t(k)]);
    }
    const double tokens = batches[i].attention_mask.sum().item<double>();
    reduce[size_t(2 * K + 1)] += tokens;
    flops += tokens * train_flops_per_token(s.model->args(), batches[i].tokens.size(1));
  }

  // 4. clip, update, schedule
  StepStats st;
  st.grad_norm = s.opt->clip_grad_norm();
  st.lr = s.schedule->lr_at(s.step);
  s.opt->set_lr_scale(s.schedule->factor_at(s.step));
  s.opt->step();
  s.pipeline.end_step(s.step);

  // 5. figures for the log, reduced once
  at::Tensor red = at::tensor(reduce, at::kDouble);
  s.comm->all_reduce(red, ReduceOp::Sum);
  st.loss = red[0].item<double>();
  for (int64_t k = 0; k < K; ++k) {
    double c = red[1 + K + k].item<double>();
    st.head_loss.push_back(c > 0 ? red[1 + k].item<double>() / c : 0.0);
  }
  st.tokens = red[2 * K + 1].item<double>();
  st.flops = s.comm->all_reduce_scalar(flops, ReduceOp::Sum);
  return st;
}

// Validation loss over the whole validation selection (every rank runs the same number of
// micro-batches; padding batches carry no labels).
std::pair<double, std::vector<double>> validate(Trainer::State& s) {
  const int64_t K = s.model->n_future();
  auto mbs = eval_micro_batches(s.valid_sampler->items(), s.geo.world_size, s.geo.rank, s.geo.micro_batch_size);
  at::Tensor sums = at::zeros({2 * K}, at::kDouble);
  MtpStepOptions opt = s.step_opts;
  opt.training = false;
  for (const auto& mb : mbs) {
    MtpBatch batch;
    if (mb.empty()) {  // keeps the collectives inside the engine in step across ranks
      batch.tokens = at::zeros({1, 8}, at::kLong);
      batch.labels = at::full({1, 8}, kIgnoreIndex, at::kLong);
    } else {
      Batch b = load_batch(*s.valid_ds, mb, s.collate);
      batch = MtpBatch{b.tokens, b.labels, {}};
    }
    MtpStepResult r = mtp_forward_loss(*s.model, *s.engine, batch, opt);
    for (int64_t k = 0; k < K; ++k) {
      sums[k] += r.unweighted_sum[size_t(k)];
      sums[K + k] += double(r.count[size_t(k)]);
    }
  }
  s.comm->all_reduce(sums, ReduceOp::Sum);
  std::vector<double> per_head;
  double total = 0;
  int64_t n = 0;
  for (int64_t k = 0; k < K; ++k) {
    double c = sums[K + k].item<double>();
    per_head.push_back(c > 0 ? sums[k].item<double>() / c : 0.0);
    if (c > 0) total += per_head.back(), ++n;
  }
  return {n ? total / double(n) : 0.0, per_head};
}

void save(Trainer::State& s) {
  TrainState st;
  st.set_int("step", s.step);
  st.set_int("data.epoch", s.cursor.epoch);
  st.set_int("data.position", s.cursor.position);
  st.set_int("data.sampler_fingerprint", int64_t(s.train_sampler->fingerprint()));
  st.set_int("consumed_samples", s.consumed_samples);
  st.set_int("global_batch_size", s.cfg.training.global_batch_size);
  st.set_int("world_size", s.geo.world_size);
  st.set_int("lr_schedule.total_steps", s.total_steps);
  st.set_double("lr_schedule.lr", s.schedule->lr_at(s.step));
  s.pipeline.save_state(st);
  SaveRequest req;
  req.step = s.step;
  req.adapters_only = s.cfg.lora.enabled && s.cfg.checkpoint.lora_only;
  req.with_optimizer = s.cfg.checkpoint.save_optimizer;
  req.config_toml = s.config_toml;
  req.state = &st;
  req.lora = s.cfg.lora.enabled ? &s.lora_info : nullptr;
  Timer t;
  std::string path = save_training_checkpoint(*s.ckpt_dir, s.cfg.checkpoint.keep_last, s.comm->comm(), *s.model,
                                              *s.engine, s.opt.get(), req);
  s.log.info("checkpoint: %s (%.1f s)", path.c_str(), t.seconds());
}

}  // namespace

int Trainer::run() {
  State& s = *s_;
  StopSignals signals;
  StepIterator it(*s.train_sampler, s.geo, s.cursor);
  const auto& ck = s.cfg.checkpoint;
  const int64_t eval_every = s.cfg.training.eval_every > 0 ? s.cfg.training.eval_every : ck.every;
  const int64_t start_step = s.step;
  Timer run_timer, interval_timer;
  double interval_tokens = 0, interval_flops = 0, first_loss = NAN, last_loss = NAN;
  int64_t interval_steps = 0, last_saved = -1;

  while (s.step < s.total_steps) {
    StepItems items = it.next();
    StepStats st = train_step(s, items);
    s.step += 1;
    s.cursor = it.cursor();
    s.consumed_samples += int64_t(items.global.size());
    if (std::isnan(first_loss)) first_loss = st.loss;
    last_loss = st.loss;
    // The loss is all-reduced, so every rank sees the same value: an agreed error exits cleanly.
    if (!std::isfinite(st.loss))
      throw Error(ErrorKind::Runtime, detail::concat("loss is ", st.loss, " at step ", s.step,
                                                     "; the last checkpoint is intact (lower the lr or check the data)"),
                  /*agreed=*/true);
    interval_tokens += st.tokens, interval_flops += st.flops, interval_steps += 1;

    const bool log_now = s.step % std::max(1, s.cfg.logging.log_interval) == 0 || s.step == s.total_steps || s.step == start_step + 1;
    if (log_now) {
      const double dt = interval_timer.seconds();
      MetricsRecord rec;
      rec.set("train/loss", st.loss).set("train/grad_norm", st.grad_norm).set("train/learning_rate", st.lr);
      rec.set("train/epoch", double(s.cursor.epoch) + double(s.cursor.position) / double(s.train_sampler->size()));
      for (size_t k = 0; k < st.head_loss.size(); ++k) rec.set("train/loss_head_" + std::to_string(k), st.head_loss[k]);
      rec.set("perf/tokens_per_sec", interval_tokens / dt);
      rec.set("perf/tokens_per_sec_per_rank", interval_tokens / dt / s.geo.world_size);
      rec.set("perf/tflops_per_rank", interval_flops / dt / s.geo.world_size / 1e12);
      rec.set("perf/mfu_pct", 100.0 * interval_flops / dt / s.geo.world_size / s.peak_flops);
      rec.set("perf/step_time_sec", dt / double(interval_steps));
      rec.set("perf/eta_sec", dt / double(interval_steps) * double(s.total_steps - s.step));
      rec.set("system/rss_max_gib", s.comm->all_reduce_scalar(double(current_rss_bytes()), ReduceOp::Max) / double(1 << 30));
      rec.set("system/rss_peak_max_gib", s.comm->all_reduce_scalar(double(peak_rss_bytes()), ReduceOp::Max) / double(1 << 30));
      s.pipeline.add_metrics(rec);
      s.metrics->write(s.step, rec);
      s.log.info("%s", format_progress(s.step, s.total_steps, rec).c_str());
      interval_tokens = interval_flops = 0, interval_steps = 0;
      interval_timer.reset();
    }

    const bool budget_done = s.cfg.training.stop_after_steps > 0 && s.step - start_step >= s.cfg.training.stop_after_steps;
    const bool stop = any_rank(s.mpi.world(), signals.requested()) || budget_done;
    const bool last = s.step == s.total_steps;
    if (s.valid_sampler && ((eval_every > 0 && s.step % eval_every == 0) || last)) {
      auto [vloss, heads] = validate(s);
      MetricsRecord rec;
      rec.set("val/loss", vloss);
      for (size_t k = 0; k < heads.size(); ++k) rec.set("val/loss_head_" + std::to_string(k), heads[k]);
      s.metrics->write(s.step, rec);
      s.log.info("validation at step %lld: loss %.4f (head 0: %.4f)", (long long)s.step, vloss, heads.empty() ? 0.0 : heads[0]);
    }
    if ((ck.every > 0 && s.step % ck.every == 0) || (last && ck.save_final) || stop) {
      save(s);
      last_saved = s.step;
    }
    if (stop && !last) {
      if (budget_done)
        s.log.info("stopped after %lld steps (training.stop_after_steps): checkpoint written; exit %d (resume me)",
                   (long long)(s.step - start_step), kExitResumeMe);
      else
        s.log.info("stopped by a signal after step %lld: checkpoint written; exit %d (resume me)", (long long)s.step,
                   kExitResumeMe);
      return kExitResumeMe;
    }
  }
  (void)last_saved;
  s.log.info("done: %lld steps in %s, loss %.4f -> %.4f; metrics in %s", (long long)(s.step - start_step),
             format_duration(run_timer.seconds()).c_str(), first_loss, last_loss, s.metrics->path().c_str());
  return 0;
}

}  // namespace wmtp
