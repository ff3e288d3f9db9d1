// Trainer: set-up (models through the pipeline, engine, optimizer, data, resume) and the loop. The
// step itself is train_step() (train/train_step.h).
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
#include "train/micro_batches.h"
#include "train/run_models.h"
#include "train/run_state.h"
#include "train/signals.h"
#include "train/start_footprint.h"
#include "train/step_profiler.h"
#include "train/train_checkpoint.h"
#include "train/train_step.h"

namespace wmtp {

namespace {

constexpr int kExitResumeMe = 75;

}  // namespace

struct Trainer::State {
  MpiEnv& mpi;
  MPI_Comm world;  // MPI_COMM_WORLD: agreement, stop requests, checkpoints and HDF5 (rt.cpu_comm wraps it)
  Logger log;
  TrainerConfigs cfg;
  Pipeline& pipeline;
  std::string config_toml;
  StopSignals& signals;
  std::string stopped_after;  // start-up ended by a stop request after this phase ("": it completed)

  Runtime
      rt;  // device, device communicator (engines), the MPI communicator for CPU tensors (cpu_comm: agreement, HDF5)
  ModelHandle trained;
  std::vector<ModelHandle> frozen;
  RunContext run;
  std::unique_ptr<ShardedAdamW> opt;
  std::unique_ptr<Dataset> train_ds, valid_ds;
  std::unique_ptr<Sampler> train_sampler, valid_sampler;
  std::unique_ptr<MicroBatchSource> train_batches, valid_batches;  // what the loops iterate
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<CheckpointDir> ckpt_dir;
  std::unique_ptr<DirLock> run_dir_lock;  // rank 0: one run per run_dir (metrics.jsonl, config.toml)
  std::unique_ptr<MetricsLog> metrics;
  std::unique_ptr<PhaseTimer> phases;      // where the step's time goes (perf/phase_*)
  std::unique_ptr<StepProfiler> profiler;  // [logging] profile_steps
  // The run's geometry (global and micro batch, world size, this rank; the accumulation it implies):
  // held here only, everything else refers to it.
  BatchGeometry geo;
  LoraRecord lora_info;  // LoRA runs: what /lora records (the adapters and their base)

  int64_t steps_per_epoch = 0, total_steps = 0;
  // What a checkpoint holds, part by part (`checkpointed` below lists them).
  RunProgress progress;  // optimizer steps done, samples consumed, the best validation loss so far
  DataPosition data;     // where the next step's data starts
  LrScheduleState schedule_state;
  FrozenModelsState frozen_state;
  std::unique_ptr<TrainedModelState> model_state;   // the trained model's tensors (/model, /lora, /value_head)
  std::unique_ptr<OptimizerState> optimizer_state;  // AdamW's moments and step (/optim)
  PeakFlops peak;
  std::string last_checkpoint;  // written or resumed from by this run ("" = none yet)

  State(MpiEnv& m, Logger l, const TrainerConfigs& c, Pipeline& p, std::string toml, StopSignals& sig)
      : mpi(m), world(m.world()), log(std::move(l)), cfg(c), pipeline(p), config_toml(std::move(toml)), signals(sig) {}
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
  s.log.info("start-up held after '%s' for up to %.0f s or until a stop signal (WMTP_TEST_HOLD_STARTUP)", phase.c_str(),
             seconds);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!s.signals.requested() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// A start-up phase boundary (collective): true, on every rank, when any rank has seen a stop request,
// so the run ends now (run() returns 75) instead of after minutes more of loading.
bool stop_requested_after(Trainer::State& s, const std::string& phase) {
  hold_for_test(s, phase);
  if (!any_rank(s.world, s.signals.requested())) return false;
  s.stopped_after = phase;
  return true;
}

// ---- start-up, in order. Each part that can end with a stop request returns true when it did.

// The run_dir (rank 0 locks it) and the datasets. Failures here may hit some ranks only (a file
// system, a node): agreed, so one message and exit 2.
bool open_run(Trainer::State& s) {
  const auto& tc = s.cfg.training;
  on_rank0(s.world, [&] {
    check_output_dir(tc.run_dir, "[training] run_dir");
    // The checkpoint directory's own lock covers a run_dir that is the same directory (a second flock
    // on it from this process would refuse this very run).
    std::error_code ec;
    if (std::filesystem::weakly_canonical(tc.run_dir, ec) !=
        std::filesystem::weakly_canonical(s.cfg.checkpoint.dir, ec))
      s.run_dir_lock = std::make_unique<DirLock>(tc.run_dir, "[training] run_dir");
  });
  s.train_ds = std::make_unique<Dataset>(agreed(s.world, [&] { return Dataset::open(s.cfg.data.train); }));
  if (!s.cfg.data.valid.empty())
    s.valid_ds = std::make_unique<Dataset>(agreed(s.world, [&] { return Dataset::open(s.cfg.data.valid); }));
  return stop_requested_after(s, "datasets");
}

// The models the pipeline declares (one place builds and loads them all), then the optimizer. The
// pipeline reads its models' files on every rank (a node may see them otherwise): agreed.
bool build_models(Trainer::State& s) {
  const uint64_t seed = uint64_t(s.cfg.training.seed);
  const int64_t data_vocab = s.train_ds->header().vocab_size;
  s.run.settings = pipeline_settings(s.cfg);  // what the pipeline reads, here and from attach() on
  const PipelineSettings& settings = s.run.settings;
  s.trained = build_model(agreed(s.world, [&] { return s.pipeline.trained_model(settings, data_vocab); }), *s.rt.comm,
                          s.cfg.sharding, seed, s.rt.device, s.rt.groups.get());
  load_model_weights(s.trained, s.world);
  if (stop_requested_after(s, s.trained.spec.role)) return true;
  for (const ModelSpec& spec : agreed(s.world, [&] { return s.pipeline.frozen_models(settings, data_vocab); })) {
    s.frozen.push_back(build_model(spec, *s.rt.comm, s.cfg.sharding, seed, s.rt.device, s.rt.groups.get()));
    load_model_weights(s.frozen.back(), s.world);
    if (stop_requested_after(s, spec.role)) return true;
  }
  s.opt = std::make_unique<ShardedAdamW>(*s.trained.engine, s.cfg.optimizer);
  if (s.valid_ds) check_validation_dataset(*s.train_ds, *s.valid_ds, s.trained.model->args().vocab_size);
  const LoraConfig& lora = s.trained.spec.lora;
  if (lora.enabled)  // the fingerprint: what merge-lora, PEFT import, frozen loads and resumes check the base against
    s.lora_info = lora_record_for(lora, s.trained.spec.weights, agreed(s.world, [&] {
                                    return lora_base_fingerprint(s.trained.spec.weights,
                                                                 json::dump(
                                                                     model_args_to_json(s.trained.model->args())),
                                                                 seed);
                                  }));
  s.model_state = std::make_unique<TrainedModelState>(s.trained, lora.enabled ? &s.lora_info : nullptr,
                                                      lora.enabled && s.cfg.checkpoint.lora_only);
  s.optimizer_state = std::make_unique<OptimizerState>(*s.opt, *s.trained.model, s.cfg.checkpoint.save_optimizer);
  return false;
}

// Samplers, the micro-batch sources, the schedule (accumulation derived for this world size:
// docs/data.md), the checkpoint directory and the metrics log.
void build_data(Trainer::State& s) {
  const auto& tc = s.cfg.training;
  s.geo.global_batch_size = tc.global_batch_size;
  s.geo.micro_batch_size = tc.micro_batch_size;
  s.geo.world_size = s.mpi.world_size();
  s.geo.rank = s.mpi.rank();
  s.geo.accumulation_steps();  // whole and positive, or Error(Usage) naming the sizes
  s.train_sampler = std::make_unique<Sampler>(s.train_ds->metadata(), s.cfg.data, Split::Train);
  if (s.valid_ds) s.valid_sampler = std::make_unique<Sampler>(s.valid_ds->metadata(), s.cfg.data, Split::Valid);
  MicroBatchOptions mbo;
  mbo.collate = CollateOptions::from(s.cfg.data, s.train_ds->header());
  mbo.pairwise = s.cfg.data.pairwise;
  mbo.device = s.rt.device;
  mbo.comm = s.world;
  s.train_batches = std::make_unique<MicroBatchSource>(*s.train_ds, *s.train_sampler, s.geo, mbo);
  if (s.valid_ds) s.valid_batches = std::make_unique<MicroBatchSource>(*s.valid_ds, *s.valid_sampler, s.geo, mbo);
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
  s.progress.geometry = &s.geo;
  s.data.sampler_fingerprint = s.train_sampler->fingerprint();
  s.data.tokenizer_fingerprint = s.train_ds->header().tokenizer_fingerprint;
  s.schedule_state.schedule = s.schedule.get();
  s.schedule_state.progress = &s.progress;
  s.frozen_state.frozen = &s.frozen;
  s.ckpt_dir = std::make_unique<CheckpointDir>(s.cfg.checkpoint.dir, s.world);
  s.metrics = std::make_unique<MetricsLog>(tc.run_dir, s.mpi.rank() == 0, s.world);
}

// Step timing (phases, logged at the log interval; an optional profiler trace), then the pipeline
// sees what was built.
void attach_pipeline(Trainer::State& s) {
  s.phases = std::make_unique<PhaseTimer>(s.trained.model->n_future(), s.rt.device);
  s.trained.engine->set_phase_timer(s.phases.get());
  for (auto& f : s.frozen) f.engine->set_phase_timer(s.phases.get());
  s.profiler = std::make_unique<StepProfiler>(s.cfg.logging.profile_steps, s.cfg.logging.profile_warmup,
                                              s.cfg.training.run_dir, s.mpi.rank() == 0, s.rt.device);
  s.run.phases = s.phases.get();
  s.run.comm = s.rt.comm.get();
  s.run.device = s.rt.device;
  s.run.world = s.world;
  s.run.log = &s.log;
  s.run.trained = &s.trained;
  for (auto& f : s.frozen) s.run.frozen.push_back(&f);
  s.pipeline.attach(s.run);
}

// The parts of the run a checkpoint holds, in the order a resume checks and then loads them: the
// frozen models first (a mismatch is the likeliest refusal), the /train values, then the tensors.
std::vector<Checkpointed*> checkpointed(Trainer::State& s) {
  return {&s.frozen_state,        &s.progress, &s.data, &s.schedule_state, &s.pipeline, s.model_state.get(),
          s.optimizer_state.get()};
}

// Resumes from [checkpoint] (resume = "auto": the newest usable, if any); returns the path ("" = none).
std::string resume(Trainer::State& s) {
  Timer t;
  const Resumed r = resume_training(s.cfg.checkpoint, s.world, checkpointed(s));
  if (r.path.empty()) return r.path;
  for (const std::string& note : r.notes) s.log.warn("%s", note.c_str());
  s.last_checkpoint = r.path;
  s.log.info("resumed from %s at step %lld in %.2f s (saved by %lld rank(s); now %d)", r.path.c_str(),
             (long long)s.progress.step, t.seconds(), (long long)s.progress.saved_world_size, s.geo.world_size);
  return r.path;
}

// MFU's peak, config.toml and the tracking sinks in run_dir (rank 0), and the plan in the log.
void log_plan(Trainer::State& s) {
  const auto& tc = s.cfg.training;
  s.peak = resolve_peak_flops(s.cfg.logging.peak_tflops, s.rt.device, s.rt.device_name, s.cfg.sharding.param_dtype);
  if (s.mpi.rank() == 0) {
    std::error_code ec;
    std::filesystem::create_directories(tc.run_dir, ec);
    std::ofstream(std::filesystem::path(tc.run_dir) / "config.toml") << s.config_toml;
    // TensorBoard/MLflow: a resumed run continues the steps (and the MLflow run) from s.progress.step.
    s.metrics->set_sink(make_tracking_sinks(s.cfg.logging.tracking,
                                            {tc.run_dir, "train-" + s.pipeline.name(), s.geo.world_size,
                                             s.progress.step, s.config_toml, s.metrics->path()},
                                            s.log, [&sig = s.signals] { return sig.requested(); }));
  }
  s.log.info("%s: %s", s.pipeline.name().c_str(), s.mpi.describe().c_str());
  s.log.info("runtime: %s; MFU peak %s", s.rt.describe().c_str(), s.peak.describe().c_str());
  s.log.info("model %s", describe_model(s.trained).c_str());
  for (const auto& f : s.frozen) s.log.info("model %s", describe_model(f).c_str());
  s.log.info(
      "data: %lld %s items, %lld steps/epoch; global batch %lld = micro %lld x accumulation %lld x %d ranks; %lld "
      "steps",
      (long long)s.train_sampler->size(), s.cfg.data.pairwise ? "pairwise" : "pointwise", (long long)s.steps_per_epoch,
      (long long)s.geo.global_batch_size, (long long)s.geo.micro_batch_size, (long long)s.geo.accumulation_steps(),
      s.geo.world_size, (long long)s.total_steps);
}

}  // namespace

Trainer::Trainer(MpiEnv& mpi, Logger log, const TrainerConfigs& cfg, Pipeline& pipeline, std::string resolved_config,
                 StopSignals& signals)
    : s_(std::make_unique<State>(mpi, std::move(log), cfg, pipeline, std::move(resolved_config), signals)) {
  State& s = *s_;
  if (s.cfg.data.train.empty())
    throw_usage("[data] train: no training dataset given (an HDF5 file from preprocess-metadata)");
  s.rt = make_runtime(mpi, s.cfg.runtime);
  if (is_hybrid(s.cfg.sharding.strategy)) add_shard_groups(s.rt, mpi, s.cfg.sharding.shard_group_size);
  // An error from here on is a start that wrote nothing: rank 0 removes the directories and locks it made.
  std::unique_ptr<StartFootprint> made;
  if (mpi.rank() == 0)
    made = std::make_unique<StartFootprint>(std::vector{s.cfg.training.run_dir, s.cfg.checkpoint.dir});
  try {
    if (open_run(s) || build_models(s)) return;  // a stop request: run() reports it
    build_data(s);
    attach_pipeline(s);
    const std::string resumed = resume(s);
    if (stop_requested_after(s, resumed.empty() ? "data" : "resume")) return;  // samplers and checkpoint dir too
    log_plan(s);
  } catch (...) {
    if (made) made->remove_created();  // the locks are still held; released as the state unwinds
    throw;
  }
}

Trainer::~Trainer() = default;

namespace {

std::string last_checkpoint_note(const Trainer::State& s) {
  return s.last_checkpoint.empty() ? "no checkpoint was written by this run"
                                   : "the last checkpoint (" + s.last_checkpoint + ") is intact";
}

// Validation over the whole validation selection (every rank runs the same number of micro-batches).
// *loss: the pipeline's validation loss (lower is better), the same on every rank.
MetricsRecord validate(Trainer::State& s, double* loss) {
  MicroBatchSource::Pass pass = s.valid_batches->pass();
  NamedStats local;
  while (std::optional<MicroBatch> mb = pass.next()) local.accumulate(s.pipeline.eval_batch(*mb));
  MetricsRecord rec;
  *loss = s.pipeline.finish_eval(reduce_stats(*s.rt.comm, local), rec);
  return rec;
}

void save(Trainer::State& s) {
  // Never commit NaN/Inf: e.g. an lr that overflows the update. Checked on every rank's shard, agreed.
  if (any_rank(s.world, !s.opt->state_is_finite()))
    throw Error(ErrorKind::Runtime,
                detail::concat("after step ", s.progress.step, " the parameters or optimizer state hold NaN/Inf: ",
                               "checkpoint not written; ", last_checkpoint_note(s), " (lower the lr)"),
                Reach::Agreed);
  const std::vector<Checkpointed*> parts = checkpointed(s);
  Timer t;
  std::string path = save_training_checkpoint(*s.ckpt_dir, s.cfg.checkpoint.keep_last, s.world,
                                              s.model_state->header(s.progress.step),
                                              std::vector<const Checkpointed*>(parts.begin(), parts.end()),
                                              s.config_toml);
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
  s.rt.cpu_comm->all_reduce(t, ReduceOp::Max);
  const double per_step = 1e3 / double(std::max<int64_t>(1, steps));
  double step = 0, top = 0;
  for (size_t i = 0; i < totals.size(); ++i) {
    const double ms = t.data_ptr<double>()[i] * per_step;
    rec.set("perf/phase_" + totals[i].name + "_ms", ms);
    if (totals[i].phase == Phase::Step) step = ms;
    if (totals[i].top_level) top += ms;
    if (totals[i].phase == Phase::HostSync)
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

// ---- the loop's parts, in loop order

int report_startup_stop(const Trainer::State& s) {  // every rank agreed on it
  s.log.info("stopped by a signal during start-up (after '%s'): no checkpoint written%s; exit %d (resume me)",
             s.stopped_after.c_str(),
             s.last_checkpoint.empty() ? "" : (", the one resumed from is untouched: " + s.last_checkpoint).c_str(),
             kExitResumeMe);
  return kExitResumeMe;
}

// A profiler trace written (or not: a warning, and training goes on, as for TensorBoard or MLflow).
void log_trace(const Trainer::State& s, const std::optional<TraceWrite>& w, const char* cut_by) {
  if (!w) return;
  if (!w->failure.empty())
    s.log.warn("profiler trace of steps %lld-%lld not written (%s); training goes on", (long long)w->first,
               (long long)w->last, w->failure.c_str());
  else
    s.log.info("profiler trace of steps %lld-%lld%s: %s (open in ui.perfetto.dev or chrome://tracing)",
               (long long)w->first, (long long)w->last, cut_by, w->path.c_str());
}

// The loop's next optimizer step and what follows it: the profiler's window; this rank's
// micro-batches read, dropout reseeded from (seed, step, rank), train_step; a step not applied or a
// loss not finite refused (both reduced over every rank, so every rank refuses alike and the agreed
// error exits cleanly); then the step count, the data cursor and the consumed samples (the step's
// global batch size).
TrainStepResult run_next_step(Trainer::State& s, MicroBatchSource::Stream& batches, int64_t start_step) {
  s.profiler->before_step(s.progress.step - start_step);
  PhaseTimer* phases = s.phases.get();
  TrainStepResult result;
  int64_t samples = 0;
  {
    PhaseScope step_phase(phases, Phase::Step);
    MicroBatchSource::GlobalBatch batch;
    {
      PhaseScope phase(phases, Phase::Data);
      batch = batches.next();
    }
    samples = int64_t(batch.items.global.size());
    at::manual_seed(uint64_t(s.cfg.training.seed) * 1000003ULL + uint64_t(s.progress.step) * 1009ULL +
                    uint64_t(s.geo.rank));
    const StepContext step_ctx{s.progress.step, s.total_steps, &s.geo, s.cfg.training.loss_normalization};
    TrainStepOptions options;
    options.phases = phases;
    options.links = s.rt.links->counter().get();
    result = train_step(s.pipeline, batch.micro_batches, *s.opt, *s.rt.comm, step_ctx,
                        s.schedule->factor_at(s.progress.step), options);
  }
  if (!result.applied)
    throw Error(ErrorKind::Runtime,
                detail::concat("gradient norm is ", result.grad_norm, " at step ", s.progress.step + 1,
                               ": the step was not applied; ", last_checkpoint_note(s),
                               " (lower the lr, or check the data)"),
                Reach::Agreed);
  s.progress.step += 1;
  log_trace(s, s.profiler->after_step(s.progress.step - start_step), "");
  s.data.cursor = batches.cursor();
  s.progress.consumed_samples += samples;
  if (!std::isfinite(result.loss))
    throw Error(ErrorKind::Runtime,
                detail::concat("loss is ", result.loss, " at step ", s.progress.step, "; ", last_checkpoint_note(s),
                               " (lower the lr or check the data)"),
                Reach::Agreed);
  return result;
}

// Throughput over the steps since the last log line.
struct LogInterval {
  Timer timer;
  double tokens = 0, flops = 0;
  int64_t steps = 0;
  LinkBytes sent;  // this rank's bytes in the steps' collectives
};

// perf/comm_bytes_{intra,inter}_per_step: the bytes a rank sends per step in collectives inside its
// node and across nodes (comm/link_bytes.h), the largest over ranks (the rank whose links carry the
// most: the figure docs/sharding.md's formulas give); ..._all_ranks_per_step: summed over ranks
// (what the nodes' network interfaces carry together, across nodes).
void add_comm_metrics(Trainer::State& s, MetricsRecord& rec, const LogInterval& iv) {
  const double steps = double(std::max<int64_t>(1, iv.steps));
  at::Tensor mine = at::tensor({double(iv.sent.intra) / steps, double(iv.sent.inter) / steps}, at::kDouble);
  at::Tensor most = mine.clone();
  s.rt.cpu_comm->all_reduce(most, ReduceOp::Max);
  s.rt.cpu_comm->all_reduce(mine, ReduceOp::Sum);
  rec.set("perf/comm_bytes_intra_per_step", most[0].item<double>());
  rec.set("perf/comm_bytes_inter_per_step", most[1].item<double>());
  rec.set("perf/comm_bytes_intra_all_ranks_per_step", mine[0].item<double>());
  rec.set("perf/comm_bytes_inter_all_ranks_per_step", mine[1].item<double>());
}

// The log line and metrics record of the last step: the pipeline's train/* keys, the step's phases,
// throughput and MFU over the interval, memory peaks (the largest over ranks). Then a new interval.
void log_interval(Trainer::State& s, const TrainStepResult& result, double lr, LogInterval& iv) {
  MetricsRecord rec = result.rec;
  add_phase_metrics(s, rec, iv.steps);  // first: it waits for the interval's device work
  add_comm_metrics(s, rec, iv);
  const double dt = iv.timer.seconds();
  const double world = s.geo.world_size;
  rec.set("train/grad_norm", result.grad_norm).set("train/learning_rate", lr);
  rec.set("train/epoch",
          double(s.data.cursor.epoch) + double(s.data.cursor.position) / double(s.train_sampler->size()));
  rec.set("perf/tokens_per_sec", iv.tokens / dt);
  rec.set("perf/tokens_per_sec_per_rank", iv.tokens / dt / world);
  rec.set("perf/tflops_per_rank", iv.flops / dt / world / 1e12);
  rec.set("perf/mfu_pct", 100.0 * iv.flops / dt / world / s.peak.flops);
  rec.set("perf/step_time_sec", dt / double(iv.steps));
  rec.set("perf/eta_sec", dt / double(iv.steps) * double(s.total_steps - s.progress.step));
  Communicator& cpu_comm = *s.rt.cpu_comm;
  const auto max_gib = [&](double bytes) { return cpu_comm.all_reduce_scalar(bytes, ReduceOp::Max) / double(1 << 30); };
  rec.set("system/rss_max_gib", max_gib(double(current_rss_bytes())));
  rec.set("system/rss_peak_max_gib", max_gib(double(peak_rss_bytes())));
  if (s.rt.device.is_cuda()) {  // the caching allocator's peaks: the model, gathers and activations live there
    const DeviceMemory m = device_memory(s.rt.device);
    rec.set("system/gpu_mem_peak_allocated_gib", max_gib(double(m.peak_allocated)));
    rec.set("system/gpu_mem_peak_reserved_gib", max_gib(double(m.peak_reserved)));
  }
  s.metrics->write(s.progress.step, rec);
  s.log.info("%s", format_progress(s.progress.step, s.total_steps, rec).c_str());
  iv = LogInterval{};
}

// Validation every eval_every steps (0: at the checkpoint cadence) and after the last step. Returns
// whether it ran and beat the best validation loss so far.
bool maybe_validate(Trainer::State& s, bool last) {
  const auto& ck = s.cfg.checkpoint;
  const int64_t every = s.cfg.training.eval_every > 0 ? s.cfg.training.eval_every : ck.every;
  if (!s.valid_batches || !((every > 0 && s.progress.step % every == 0) || last)) return false;
  double vloss = 0;
  PausePhases pause(*s.phases);
  MetricsRecord rec = validate(s, &vloss);
  const bool improved = vloss < s.progress.best_val_loss;
  if (improved) s.progress.best_val_loss = vloss;
  s.metrics->write(s.progress.step, rec);
  s.log.info("validation at step %lld: %s%s", (long long)s.progress.step, format_metrics(rec).c_str(),
             improved && ck.save_best ? " (best so far: checkpoint)" : "");
  return improved;
}

// A checkpoint at the cadence, after the last step (save_final), on a new best (save_best) and
// before stopping.
void maybe_checkpoint(Trainer::State& s, bool last, bool improved, bool stop) {
  const auto& ck = s.cfg.checkpoint;
  if ((ck.every > 0 && s.progress.step % ck.every == 0) || (last && ck.save_final) || (ck.save_best && improved) ||
      stop) {
    PausePhases pause(*s.phases);
    save(s);
  }
}

int report_stop(Trainer::State& s, bool budget_done, int64_t start_step) {
  log_trace(s, s.profiler->finish_early(s.progress.step - start_step), " (the window cut short by the stop)");
  if (budget_done)
    s.log.info("stopped after %lld steps (training.stop_after_steps): checkpoint written; exit %d (resume me)",
               (long long)(s.progress.step - start_step), kExitResumeMe);
  else
    s.log.info("stopped by a signal after step %lld: checkpoint written; exit %d (resume me)",
               (long long)s.progress.step, kExitResumeMe);
  s.metrics->finish(RunEnd::Stopped);
  return kExitResumeMe;
}

}  // namespace

int Trainer::run() {
  State& s = *s_;
  if (!s.stopped_after.empty()) return report_startup_stop(s);
  MicroBatchSource::Stream batches = s.train_batches->stream(s.data.cursor);
  const int64_t start_step = s.progress.step;
  const int64_t budget = s.cfg.training.stop_after_steps;
  const std::string profile_note = s.profiler->plan(start_step, budget > 0
                                                                    ? std::min(s.total_steps, start_step + budget)
                                                                    : s.total_steps);
  if (!profile_note.empty()) s.log.info("%s", profile_note.c_str());
  const int log_every = std::max(1, s.cfg.logging.log_interval);
  Timer run_timer;
  LogInterval interval;
  double first_loss = NAN, last_loss = NAN;
  while (s.progress.step < s.total_steps) {
    const double lr = s.schedule->lr_at(s.progress.step);
    const TrainStepResult result = run_next_step(s, batches, start_step);
    if (std::isnan(first_loss)) first_loss = result.loss;
    last_loss = result.loss;
    interval.tokens += result.stats.tokens, interval.flops += result.stats.flops, interval.steps += 1;
    interval.sent += result.sent;
    if (s.progress.step % log_every == 0 || s.progress.step == s.total_steps || s.progress.step == start_step + 1)
      log_interval(s, result, lr, interval);

    const bool budget_done = s.cfg.training.stop_after_steps > 0 &&
                             s.progress.step - start_step >= s.cfg.training.stop_after_steps;
    const bool stop = any_rank(s.world, s.signals.requested()) || budget_done;
    const bool last = s.progress.step == s.total_steps;
    maybe_checkpoint(s, last, maybe_validate(s, last), stop);
    if (stop && !last) return report_stop(s, budget_done, start_step);
  }
  log_trace(s, s.profiler->finish_early(s.progress.step - start_step), " (the window cut short by the last step)");
  s.log.info("done: %lld steps in %s, loss %.4f -> %.4f; metrics in %s", (long long)(s.progress.step - start_step),
             format_duration(run_timer.seconds()).c_str(), first_loss, last_loss, s.metrics->path().c_str());
  s.metrics->finish(RunEnd::Finished);
  return 0;
}

}  // namespace wmtp
