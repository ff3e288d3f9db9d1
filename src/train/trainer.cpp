// Trainer: set-up (models through the pipeline, engine, optimizer, data, resume) and the loop. The
// step itself is train_step(): it reads top-down on one screen.
#include "train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "ckpt/dir_lock.h"
#include "core/config.h"
#include "core/error.h"
#include "core/json.h"
#include "core/memory.h"
#include "core/output_path.h"
#include "core/phase_timer.h"
#include "core/timer.h"
#include "data/collate.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "comm/agree.h"
#include "comm/device.h"
#include "comm/mpi_env.h"
#include "comm/runtime.h"
#include "model/mtp.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "track/fanout.h"
#include "train/flops.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/run_models.h"
#include "train/signals.h"
#include "train/step_profiler.h"
#include "train/train_checkpoint.h"

namespace wmtp {

namespace {

constexpr int kExitResumeMe = 75;

// The phases a step is timed in (core/phase_timer.h). Top level, in step order: data (loading and
// uploading the micro-batches), prepare (the pipeline's begin_step and the counts' all-reduce),
// trunk_forward, head_<k>, trunk_backward (the model's step, model/mtp_step.h), clip, optimizer;
// "step" spans them all and the rest of train_step. Inside them: allgather_wait and
// reduce_scatter_wait (the engine) and host_sync (host clock: the host blocked on the device).
const char* const kTopPhases[] = {"data", "prepare", "trunk_forward", "trunk_backward", "clip", "optimizer"};

std::vector<std::string> step_phase_names(int64_t heads) {
  std::vector<std::string> names(std::begin(kTopPhases), std::end(kTopPhases));
  for (int64_t k = 0; k < heads; ++k) names.push_back("head_" + std::to_string(k));
  for (const char* n : {"allgather_wait", "reduce_scatter_wait", "host_sync", "step"}) names.push_back(n);
  return names;
}

bool is_top_phase(const std::string& name) {
  if (name.rfind("head_", 0) == 0) return true;
  for (const char* t : kTopPhases)
    if (name == t) return true;
  return false;
}

}  // namespace

struct Trainer::State {
  MpiEnv& mpi;
  Logger log;
  TrainerConfigs cfg;
  Pipeline& pipeline;
  std::string config_toml;
  StopSignals& signals;
  std::string stopped_after;  // start-up ended by a stop request after this phase ("": it completed)

  Runtime rt;  // device, device communicator (engines), host MPI communicator (agreement, HDF5)
  ModelHandle trained;
  std::vector<ModelHandle> frozen;
  RunContext run;
  std::unique_ptr<ShardedAdamW> opt;
  std::unique_ptr<Dataset> train_ds, valid_ds;
  std::unique_ptr<Sampler> train_sampler, valid_sampler;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<CheckpointDir> ckpt_dir;
  std::unique_ptr<DirLock> run_dir_lock;  // rank 0: one run per run_dir (metrics.jsonl, config.toml)
  std::unique_ptr<MetricsLog> metrics;
  std::unique_ptr<PhaseTimer> phases;      // where the step's time goes (perf/phase_*)
  std::unique_ptr<StepProfiler> profiler;  // [logging] profile_steps
  BatchGeometry geo;
  CollateOptions collate;
  LoraInfo lora_info;

  int64_t accum = 1, steps_per_epoch = 0, total_steps = 0;
  int64_t step = 0;  // optimizer steps done
  DataCursor cursor;
  int64_t consumed_samples = 0;
  PeakFlops peak;
  double best_val_loss = INFINITY;  // lowest validation loss so far (checkpoint.save_best), kept in /train
  std::string last_checkpoint;      // written or resumed from by this run ("" = none yet)

  State(MpiEnv& m, Logger l, const TrainerConfigs& c, Pipeline& p, std::string toml, StopSignals& sig)
      : mpi(m), log(std::move(l)), cfg(c), pipeline(p), config_toml(std::move(toml)), signals(sig) {}
};

namespace {

// Test-only: WMTP_TEST_HOLD_STARTUP="PHASE SECONDS" holds start-up at PHASE until this rank sees a
// stop request or SECONDS pass, so a test can signal a given phase (at 7B each lasts minutes; with
// the tiny model, milliseconds).
void hold_for_test(const Trainer::State& s, const std::string& phase) {
  const char* v = std::getenv("WMTP_TEST_HOLD_STARTUP");
  std::istringstream in(v ? v : "");
  std::string key;
  double seconds = 0;
  if (!(in >> key >> seconds) || key != phase) return;
  s.log.info("start-up held after '%s' for up to %.0f s or until a stop signal (WMTP_TEST_HOLD_STARTUP)",
             phase.c_str(), seconds);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!s.signals.requested() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// A start-up phase boundary (collective): true, on every rank, when any rank has seen a stop request,
// so the run ends now (run() returns 75) instead of after minutes more of loading.
bool stop_requested_after(Trainer::State& s, const std::string& phase) {
  hold_for_test(s, phase);
  if (!any_rank(s.mpi.world(), s.signals.requested())) return false;
  s.stopped_after = phase;
  return true;
}

}  // namespace

Trainer::Trainer(MpiEnv& mpi, Logger log, const TrainerConfigs& cfg, Pipeline& pipeline, std::string resolved_config,
                 StopSignals& signals)
    : s_(std::make_unique<State>(mpi, std::move(log), cfg, pipeline, std::move(resolved_config), signals)) {
  State& s = *s_;
  const auto& tc = s.cfg.training;
  s.cfg.data.validate();
  validate_checkpoint_config(s.cfg.checkpoint);
  if (s.cfg.data.train.empty()) throw_usage("[data] train: no training dataset given (an HDF5 file from preprocess-metadata)");

  s.rt = make_runtime(mpi, s.cfg.runtime);
  // Failures here may hit some ranks only (a file system, a node): agreed, so one message and exit 2.
  on_rank0(mpi.world(), [&] {
    check_output_dir(tc.run_dir, "[training] run_dir");
    // The checkpoint directory's own lock covers a run_dir that is the same directory (a second flock
    // on it from this process would refuse this very run).
    std::error_code ec;
    if (std::filesystem::weakly_canonical(tc.run_dir, ec) != std::filesystem::weakly_canonical(s.cfg.checkpoint.dir, ec))
      s.run_dir_lock = std::make_unique<DirLock>(tc.run_dir, "[training] run_dir");
  });
  s.train_ds = std::make_unique<Dataset>(agreed(mpi.world(), [&] { return Dataset::open(s.cfg.data.train); }));
  if (!s.cfg.data.valid.empty())
    s.valid_ds = std::make_unique<Dataset>(agreed(mpi.world(), [&] { return Dataset::open(s.cfg.data.valid); }));
  if (stop_requested_after(s, "datasets")) return;

  // ---- models (the pipeline declares them; one place builds and loads them all), optimizer
  // The pipeline reads its models' files on every rank (a node may see them otherwise): agreed.
  const int64_t data_vocab = s.train_ds->info().vocab_size;
  const PipelineSettings settings = pipeline_settings(s.cfg);
  s.trained = build_model(agreed(mpi.world(), [&] { return s.pipeline.trained_model(settings, data_vocab); }), *s.rt.comm,
                          s.cfg.sharding, uint64_t(tc.seed), s.rt.device);
  load_model_weights(s.trained, s.rt.host->comm());
  if (stop_requested_after(s, s.trained.spec.role)) return;
  for (const ModelSpec& spec : agreed(mpi.world(), [&] { return s.pipeline.frozen_models(settings, data_vocab); })) {
    s.frozen.push_back(build_model(spec, *s.rt.comm, s.cfg.sharding, uint64_t(tc.seed), s.rt.device));
    load_model_weights(s.frozen.back(), s.rt.host->comm());
    if (stop_requested_after(s, spec.role)) return;
  }
  s.opt = std::make_unique<ShardedAdamW>(*s.trained.engine, s.cfg.optimizer);
  if (s.valid_ds) check_validation_dataset(*s.train_ds, *s.valid_ds, s.trained.model->args().vocab_size);
  const LoraConfig& lora = s.trained.spec.lora;
  if (lora.enabled) {
    s.lora_info.rank = lora.rank;
    s.lora_info.alpha = lora.alpha;
    s.lora_info.dropout = lora.dropout;
    s.lora_info.targets = lora_target_names(lora);
    s.lora_info.base_path = s.trained.spec.weights;
    // What merge-lora, PEFT import, frozen loads and resumes check the base against.
    s.lora_info.base_fingerprint = agreed(mpi.world(), [&] {
      return lora_base_fingerprint(s.trained.spec.weights, json::dump(model_args_to_json(s.trained.model->args())),
                                   uint64_t(tc.seed));
    });
  }

  // ---- data and schedule (accumulation derived for this world size: docs/data.md)
  s.geo.global_batch_size = tc.global_batch_size;
  s.geo.micro_batch_size = tc.micro_batch_size;
  s.geo.world_size = mpi.world_size();
  s.geo.rank = mpi.rank();
  s.accum = s.geo.accumulation_steps();
  s.train_sampler = std::make_unique<Sampler>(s.train_ds->metadata(), s.cfg.data, Split::Train);
  if (s.valid_ds) s.valid_sampler = std::make_unique<Sampler>(s.valid_ds->metadata(), s.cfg.data, Split::Valid);
  s.collate = CollateOptions::from(s.cfg.data, s.train_ds->info());
  auto check_labels = [&](const Dataset& ds, const Sampler& sampler) {  // same data everywhere: agreed
    const std::string note = check_label_coverage(ds, sampler.items(), s.cfg.data.max_length);
    if (!note.empty()) s.log.warn("%s", note.c_str());
  };
  check_labels(*s.train_ds, *s.train_sampler);
  if (s.valid_sampler) check_labels(*s.valid_ds, *s.valid_sampler);
  s.steps_per_epoch = s.train_sampler->steps_per_epoch(tc.global_batch_size);
  s.total_steps = tc.max_steps > 0 ? tc.max_steps
                                   : std::max<int64_t>(1, int64_t(tc.n_epochs * double(s.steps_per_epoch)));
  s.schedule = std::make_unique<LrSchedule>(s.cfg.lr_schedule, s.cfg.optimizer.lr, s.total_steps);
  s.ckpt_dir = std::make_unique<CheckpointDir>(s.cfg.checkpoint.dir, s.rt.host->comm());
  s.metrics = std::make_unique<MetricsLog>(tc.run_dir, mpi.rank() == 0);

  // ---- step timing: phases (logged at the log interval) and an optional profiler trace
  s.phases = std::make_unique<PhaseTimer>(step_phase_names(s.trained.model->n_future()), s.rt.device);
  s.trained.engine->set_phase_timer(s.phases.get());
  for (auto& f : s.frozen) f.engine->set_phase_timer(s.phases.get());
  s.profiler = std::make_unique<StepProfiler>(s.cfg.logging.profile_steps, s.cfg.logging.profile_warmup, tc.run_dir,
                                              mpi.rank() == 0, s.rt.device);

  // ---- the pipeline sees what was built
  s.run.settings = settings;
  s.run.phases = s.phases.get();
  s.run.comm = s.rt.comm.get();
  s.run.device = s.rt.device;
  s.run.host = s.rt.host->comm();
  s.run.log = &s.log;
  s.run.rank = mpi.rank();
  s.run.world_size = mpi.world_size();
  s.run.accumulation = s.accum;
  s.run.trained = &s.trained;
  for (auto& f : s.frozen) s.run.frozen.push_back(&f);
  s.pipeline.attach(s.run);

  // ---- resume
  std::string resume = resolve_resume_path(s.cfg.checkpoint, s.rt.host->comm());
  if (!resume.empty()) {
    TrainState st = load_training_checkpoint(resume, s.rt.host->comm(), *s.trained.model, *s.trained.engine, s.opt.get(),
                                             LoadPurpose::Resume, lora.enabled ? &s.lora_info : nullptr);
    for (const std::string& note : check_frozen_models(st, s.frozen, resume)) s.log.warn("%s", note.c_str());
    s.step = st.get_int("step");
    s.cursor.epoch = st.get_int("data.epoch");
    s.cursor.position = st.get_int("data.position");
    s.consumed_samples = st.get_int_or("consumed_samples", 0);
    s.best_val_loss = st.get_double_or("checkpoint.best_val_loss", INFINITY);
    if (st.has("data.sampler_fingerprint") &&
        uint64_t(st.get_int("data.sampler_fingerprint")) != s.train_sampler->fingerprint())
      s.log.warn("resuming from %s with a different sample selection (data or [data] config changed): "
                 "the data cursor no longer points at the same items", resume.c_str());
    if (st.has("global_batch_size") && st.get_int("global_batch_size") != tc.global_batch_size)
      s.log.warn("resuming with global_batch_size %d (checkpoint: %lld): steps no longer map to the same batches",
                 tc.global_batch_size, (long long)st.get_int("global_batch_size"));
    s.pipeline.load_state(st);
    s.last_checkpoint = resume;
    s.log.info("resumed from %s at step %lld (saved by %lld rank(s); now %d)", resume.c_str(), (long long)s.step,
               (long long)st.get_int_or("world_size", 0), mpi.world_size());
  }
  if (stop_requested_after(s, resume.empty() ? "data" : "resume")) return;  // samplers and checkpoint dir too

  s.peak = resolve_peak_flops(s.cfg.logging.peak_tflops, s.rt.device, s.rt.device_name,
                              s.cfg.sharding.param_scalar_type());
  if (mpi.rank() == 0) {
    std::error_code ec;
    std::filesystem::create_directories(tc.run_dir, ec);
    std::ofstream(std::filesystem::path(tc.run_dir) / "config.toml") << s.config_toml;
    // TensorBoard/MLflow: a resumed run continues the steps (and the MLflow run) from s.step.
    s.metrics->set_sink(make_tracking_sinks(s.cfg.logging.tracking,
                                            {tc.run_dir, "train-" + s.pipeline.name(), mpi.world_size(), s.step,
                                             s.config_toml},
                                            s.log));
  }
  s.log.info("%s: %s", s.pipeline.name().c_str(), mpi.describe().c_str());
  s.log.info("runtime: %s; MFU peak %s", s.rt.describe().c_str(), s.peak.describe().c_str());
  s.log.info("model %s", describe_model(s.trained).c_str());
  for (const auto& f : s.frozen) s.log.info("model %s", describe_model(f).c_str());
  s.log.info("data: %lld %s items, %lld steps/epoch; global batch %d = micro %d x accumulation %lld x %d ranks; %lld steps",
             (long long)s.train_sampler->size(), s.cfg.data.pairwise ? "pairwise" : "pointwise",
             (long long)s.steps_per_epoch, tc.global_batch_size, tc.micro_batch_size, (long long)s.accum,
             mpi.world_size(), (long long)s.total_steps);
}

Trainer::~Trainer() = default;

namespace {

// A collated batch's tensors on the run's device (pinned memory, non-blocking copies).
void upload(Batch& b, c10::Device d) {
  b.tokens = to_device(b.tokens, d);
  b.labels = to_device(b.labels, d);
  b.attention_mask = to_device(b.attention_mask, d);
  b.is_correct = to_device(b.is_correct, d);
}

MicroBatch load_micro_batch(const Trainer::State& s, const Dataset& ds, const std::vector<DataItem>& items) {
  MicroBatch mb;
  if (s.cfg.data.pairwise) {
    PairBatch pb = load_pair_batch(ds, items, s.collate);
    mb.batch = std::move(pb.pos);
    mb.neg = std::move(pb.neg);
    upload(mb.neg, s.rt.device);
  } else {
    mb.batch = load_batch(ds, items, s.collate);
  }
  mb.host = mb.batch;  // kept: counts and row selection read it without waiting for the device
  upload(mb.batch, s.rt.device);
  return mb;
}

std::string last_checkpoint_note(const Trainer::State& s) {
  return s.last_checkpoint.empty() ? "no checkpoint was written by this run"
                                   : "the last checkpoint (" + s.last_checkpoint + ") is intact";
}

// Validation filler: a batch without labels that keeps the collectives inside the engines in step
// on a rank that has run out of validation items.
MicroBatch filler_micro_batch(bool pairwise, c10::Device device) {
  Batch b;
  b.tokens = at::zeros({1, 8}, at::kLong);
  b.labels = at::full({1, 8}, kIgnoreIndex, at::kLong);
  b.attention_mask = at::zeros({1, 8}, at::kLong);
  b.is_correct = at::zeros({1}, at::kFloat);
  upload(b, device);
  MicroBatch mb;
  mb.batch = b;
  if (pairwise) mb.neg = b;
  mb.filler = true;
  return mb;
}

// Sums and maxima of a StepStats over every rank: one all-reduce each (tokens and flops ride with
// the sums).
StepStats reduce_stats(Communicator& comm, StepStats local) {
  std::vector<double> sums = local.sum;
  sums.push_back(local.tokens);
  sums.push_back(local.flops);
  at::Tensor t = at::tensor(sums, at::kDouble);
  comm.all_reduce(t, ReduceOp::Sum);
  StepStats g;
  g.layout = local.layout;
  const double* p = t.data_ptr<double>();
  g.sum.assign(p, p + local.sum.size());
  g.tokens = p[local.sum.size()];
  g.flops = p[local.sum.size() + 1];
  if (!local.max.empty()) {
    at::Tensor m = at::tensor(local.max, at::kDouble);
    comm.all_reduce(m, ReduceOp::Max);
    g.max.assign(m.data_ptr<double>(), m.data_ptr<double>() + local.max.size());
  }
  return g;
}

std::vector<double> reduce_counts(Communicator& comm, const std::vector<double>& local) {
  if (local.empty()) return {};
  at::Tensor t = at::tensor(local, at::kDouble);
  comm.all_reduce(t, ReduceOp::Sum);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + local.size());
}

// What one optimizer step produced, already reduced over every rank.
struct StepResult {
  double loss = 0, grad_norm = 0, lr = 0, tokens = 0, flops = 0;
  MetricsRecord rec;  // the pipeline's train/* keys
};

// ---- one optimizer step -------------------------------------------------------------------
StepResult train_step(Trainer::State& s, const StepItems& items) {
  PhaseTimer* phases = s.phases.get();
  PhaseScope step_phase(phases, "step");
  StepInfo info{s.step, s.total_steps, s.accum, s.geo.world_size,
                s.cfg.training.loss_normalization == "micro_batch"};
  // 1. this rank's micro-batches; what the pipeline needs from all of them before any backward
  std::vector<MicroBatch> mbs;  // a read failure on one rank is every rank's error (one all-reduce)
  {
    PhaseScope phase(phases, "data");
    agreed(s.mpi.world(), [&] {
      for (const auto& items_mb : items.micro_batches) mbs.push_back(load_micro_batch(s, *s.train_ds, items_mb));
    });
  }
  auto prepare_phase = std::make_unique<PhaseScope>(phases, "prepare");
  at::manual_seed(uint64_t(s.cfg.training.seed) * 1000003ULL + uint64_t(s.step) * 1009ULL + uint64_t(s.geo.rank));
  s.pipeline.begin_step(info, mbs);
  // 2. the step's global normalisation counts: one all-reduce (docs/training.md)
  const std::vector<double> global_counts = reduce_counts(*s.rt.comm, s.pipeline.local_counts(info, mbs));
  prepare_phase.reset();

  // 3. forward/backward per micro-batch; gradients reduce-scattered as sums inside backward
  s.opt->zero_grad();
  StepStats local;
  for (const MicroBatch& mb : mbs) {
    const std::vector<double> counts = info.micro_batch_normalization ? s.pipeline.micro_counts(info, mb) : global_counts;
    local.accumulate(s.pipeline.forward_backward(info, mb, counts));
  }

  // 4. clip, update, schedule
  StepResult r;
  {
    PhaseScope phase(phases, "clip");
    r.grad_norm = s.opt->clip_grad_norm();
  }
  if (!std::isfinite(r.grad_norm))  // all-reduced: every rank refuses the same step (ShardedAdamW would too)
    throw Error(ErrorKind::Runtime,
                detail::concat("gradient norm is ", r.grad_norm, " at step ", s.step + 1, ": the step was not applied; ",
                               last_checkpoint_note(s), " (lower the lr, or check the data)"),
                Reach::Agreed);
  r.lr = s.schedule->lr_at(s.step);
  s.opt->set_lr_scale(s.schedule->factor_at(s.step));
  {
    PhaseScope phase(phases, "optimizer");
    s.opt->step();
  }

  // 5. statistics reduced once; the pipeline turns them into its loss, metrics and state updates
  StepStats global = reduce_stats(*s.rt.comm, local);
  r.loss = s.pipeline.finish_step(info, global, r.rec);
  r.tokens = global.tokens;
  r.flops = global.flops;
  return r;
}

// Validation over the whole validation selection (every rank runs the same number of micro-batches).
// *loss: the pipeline's validation loss (lower is better), the same on every rank.
MetricsRecord validate(Trainer::State& s, double* loss) {
  auto mbs = eval_micro_batches(s.valid_sampler->items(), s.geo.world_size, s.geo.rank, s.geo.micro_batch_size);
  StepStats local;
  for (const auto& items : mbs) {
    // A rank with a filler joins the read's agreement too: the collectives must match on every rank
    // (a rank skipping the all-reduce would meet the others' in the model's first gather: a hang).
    MicroBatch mb = agreed(s.mpi.world(), [&] {
      return items.empty() ? filler_micro_batch(s.cfg.data.pairwise, s.rt.device)
                           : load_micro_batch(s, *s.valid_ds, items);
    });
    local.accumulate(s.pipeline.eval_batch(mb));
  }
  MetricsRecord rec;
  *loss = s.pipeline.finish_eval(reduce_stats(*s.rt.comm, local), rec);
  return rec;
}

void save(Trainer::State& s) {
  // Never commit NaN/Inf: e.g. an lr that overflows the update. Checked on every rank's shard, agreed.
  if (any_rank(s.mpi.world(), !s.opt->state_is_finite()))
    throw Error(ErrorKind::Runtime,
                detail::concat("after step ", s.step, " the parameters or optimizer state hold NaN/Inf: checkpoint not ",
                               "written; ", last_checkpoint_note(s), " (lower the lr)"),
                Reach::Agreed);
  TrainState st;
  st.set_int("step", s.step);
  st.set_int("data.epoch", s.cursor.epoch);
  st.set_int("data.position", s.cursor.position);
  st.set_int("data.sampler_fingerprint", int64_t(s.train_sampler->fingerprint()));
  // Which tokenizer made the token ids this model learnt (a model read by another run, e.g. rho1's
  // reference, must share it).
  st.set_string("data.tokenizer_fingerprint", s.train_ds->info().tokenizer_fingerprint);
  if (std::isfinite(s.best_val_loss)) st.set_double("checkpoint.best_val_loss", s.best_val_loss);
  st.set_int("consumed_samples", s.consumed_samples);
  st.set_int("global_batch_size", s.cfg.training.global_batch_size);
  st.set_int("world_size", s.geo.world_size);
  st.set_int("lr_schedule.total_steps", s.total_steps);
  st.set_double("lr_schedule.lr", s.schedule->lr_at(s.step));
  record_frozen_models(st, s.frozen);  // a resume must train against the same frozen models
  s.pipeline.save_state(st);
  SaveRequest req;
  req.step = s.step;
  req.adapters_only = s.trained.spec.lora.enabled && s.cfg.checkpoint.lora_only;
  req.with_optimizer = s.cfg.checkpoint.save_optimizer;
  req.config_toml = s.config_toml;
  req.state = &st;
  req.lora = s.trained.spec.lora.enabled ? &s.lora_info : nullptr;
  Timer t;
  std::string path = save_training_checkpoint(*s.ckpt_dir, s.cfg.checkpoint.keep_last, s.rt.host->comm(),
                                              *s.trained.model, *s.trained.engine, s.opt.get(), req);
  s.log.info("checkpoint: %s (%.1f s)", path.c_str(), t.seconds());
  s.last_checkpoint = path;
}

// perf/phase_<name>_ms: each phase's time per step over the interval, the largest over ranks (the
// step waits for its slowest rank); perf/phase_other_ms: the step's time outside the top-level
// phases; perf/host_syncs_per_step. Reading the phases waits for the device: log interval only.
void add_phase_metrics(Trainer::State& s, MetricsRecord& rec, int64_t steps) {
  std::vector<PhaseTotal> totals = s.phases->take();
  std::vector<double> seconds;
  for (const PhaseTotal& t : totals) seconds.push_back(t.seconds);
  at::Tensor t = at::tensor(seconds, at::kDouble);
  s.rt.host->all_reduce(t, ReduceOp::Max);
  const double per_step = 1e3 / double(std::max<int64_t>(1, steps));
  double step = 0, top = 0;
  for (size_t i = 0; i < totals.size(); ++i) {
    const double ms = t.data_ptr<double>()[i] * per_step;
    rec.set("perf/phase_" + totals[i].name + "_ms", ms);
    if (totals[i].name == "step") step = ms;
    if (is_top_phase(totals[i].name)) top += ms;
    if (totals[i].name == "host_sync")
      rec.set("perf/host_syncs_per_step", double(totals[i].count) / double(std::max<int64_t>(1, steps)));
  }
  rec.set("perf/phase_other_ms", std::max(0.0, step - top));
}

// Phases are timed for training steps only: validation and checkpoints pause them.
struct PausePhases {
  PhaseTimer& t;
  explicit PausePhases(PhaseTimer& timer) : t(timer) { t.set_paused(true); }
  ~PausePhases() { t.set_paused(false); }
};

}  // namespace

int Trainer::run() {
  State& s = *s_;
  if (!s.stopped_after.empty()) {  // every rank agreed on it
    s.log.info("stopped by a signal during start-up (after '%s'): no checkpoint written%s; exit %d (resume me)",
               s.stopped_after.c_str(),
               s.last_checkpoint.empty() ? "" : (", the one resumed from is untouched: " + s.last_checkpoint).c_str(),
               kExitResumeMe);
    return kExitResumeMe;
  }
  StepIterator it(*s.train_sampler, s.geo, s.cursor);
  const auto& ck = s.cfg.checkpoint;
  const int64_t eval_every = s.cfg.training.eval_every > 0 ? s.cfg.training.eval_every : ck.every;
  const int64_t start_step = s.step;
  Timer run_timer, interval_timer;
  double interval_tokens = 0, interval_flops = 0, first_loss = NAN, last_loss = NAN;
  int64_t interval_steps = 0;

  while (s.step < s.total_steps) {
    StepItems items = it.next();
    s.profiler->before_step(s.step - start_step);
    StepResult st = train_step(s, items);
    s.step += 1;
    const std::string trace = s.profiler->after_step(s.step - start_step);
    if (!trace.empty())
      s.log.info("profiler trace of steps %lld-%lld: %s (open in ui.perfetto.dev or chrome://tracing)",
                 (long long)(s.step - s.cfg.logging.profile_steps + 1), (long long)s.step, trace.c_str());
    s.cursor = it.cursor();
    s.consumed_samples += int64_t(items.global.size());
    if (std::isnan(first_loss)) first_loss = st.loss;
    last_loss = st.loss;
    // The loss is reduced over every rank, so every rank sees the same value: an agreed error exits cleanly.
    if (!std::isfinite(st.loss))
      throw Error(ErrorKind::Runtime, detail::concat("loss is ", st.loss, " at step ", s.step, "; ", last_checkpoint_note(s),
                                                     " (lower the lr or check the data)"),
                  Reach::Agreed);
    interval_tokens += st.tokens, interval_flops += st.flops, interval_steps += 1;

    const bool log_now = s.step % std::max(1, s.cfg.logging.log_interval) == 0 || s.step == s.total_steps || s.step == start_step + 1;
    if (log_now) {
      MetricsRecord rec = st.rec;
      add_phase_metrics(s, rec, interval_steps);  // first: it waits for the interval's device work
      const double dt = interval_timer.seconds();
      rec.set("train/grad_norm", st.grad_norm).set("train/learning_rate", st.lr);
      rec.set("train/epoch", double(s.cursor.epoch) + double(s.cursor.position) / double(s.train_sampler->size()));
      rec.set("perf/tokens_per_sec", interval_tokens / dt);
      rec.set("perf/tokens_per_sec_per_rank", interval_tokens / dt / s.geo.world_size);
      rec.set("perf/tflops_per_rank", interval_flops / dt / s.geo.world_size / 1e12);
      rec.set("perf/mfu_pct", 100.0 * interval_flops / dt / s.geo.world_size / s.peak.flops);
      rec.set("perf/step_time_sec", dt / double(interval_steps));
      rec.set("perf/eta_sec", dt / double(interval_steps) * double(s.total_steps - s.step));
      Communicator& host = *s.rt.host;
      rec.set("system/rss_max_gib", host.all_reduce_scalar(double(current_rss_bytes()), ReduceOp::Max) / double(1 << 30));
      rec.set("system/rss_peak_max_gib", host.all_reduce_scalar(double(peak_rss_bytes()), ReduceOp::Max) / double(1 << 30));
      if (s.rt.device.is_cuda()) {  // the caching allocator's peaks: the model, gathers and activations live there
        const DeviceMemory m = device_memory(s.rt.device);
        rec.set("system/gpu_mem_peak_allocated_gib", host.all_reduce_scalar(double(m.peak_allocated), ReduceOp::Max) / double(1 << 30));
        rec.set("system/gpu_mem_peak_reserved_gib", host.all_reduce_scalar(double(m.peak_reserved), ReduceOp::Max) / double(1 << 30));
      }
      s.metrics->write(s.step, rec);
      s.log.info("%s", format_progress(s.step, s.total_steps, rec).c_str());
      interval_tokens = interval_flops = 0, interval_steps = 0;
      interval_timer.reset();
    }

    const bool budget_done = s.cfg.training.stop_after_steps > 0 && s.step - start_step >= s.cfg.training.stop_after_steps;
    const bool stop = any_rank(s.mpi.world(), s.signals.requested()) || budget_done;
    const bool last = s.step == s.total_steps;
    bool improved = false;
    if (s.valid_sampler && ((eval_every > 0 && s.step % eval_every == 0) || last)) {
      double vloss = 0;
      PausePhases pause(*s.phases);
      MetricsRecord rec = validate(s, &vloss);
      improved = vloss < s.best_val_loss;
      if (improved) s.best_val_loss = vloss;
      s.metrics->write(s.step, rec);
      s.log.info("validation at step %lld: %s%s", (long long)s.step, format_metrics(rec).c_str(),
                 improved && ck.save_best ? " (best so far: checkpoint)" : "");
    }
    if ((ck.every > 0 && s.step % ck.every == 0) || (last && ck.save_final) || (ck.save_best && improved) || stop) {
      PausePhases pause(*s.phases);
      save(s);
    }
    if (stop && !last) {
      if (budget_done)
        s.log.info("stopped after %lld steps (training.stop_after_steps): checkpoint written; exit %d (resume me)",
                   (long long)(s.step - start_step), kExitResumeMe);
      else
        s.log.info("stopped by a signal after step %lld: checkpoint written; exit %d (resume me)", (long long)s.step,
                   kExitResumeMe);
      s.metrics->finish(RunEnd::Stopped);
      return kExitResumeMe;
    }
  }
  s.log.info("done: %lld steps in %s, loss %.4f -> %.4f; metrics in %s", (long long)(s.step - start_step),
             format_duration(run_timer.seconds()).c_str(), first_loss, last_loss, s.metrics->path().c_str());
  s.metrics->finish(RunEnd::Finished);
  return 0;
}

}  // namespace wmtp
