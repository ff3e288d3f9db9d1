// --dry-run: the shard plan and the memory plan of a planned run (plan/memory_plan.h) — per rank on
// its device, per node on the host — without MPI traffic, a GPU or the weights: the device is the
// configured one ([runtime] device = cuda plans a GPU run on a machine without one), its budget
// [runtime] gpu_memory_gib or gpu_name's capacity (or the visible GPU's), and a checkpoint that does
// not exist yet is planned from [model]. When the plan does not fit, the levers that would make it
// fit are printed with their figures.
#include "plan/dry_run.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/choice_names.h"
#include "core/error.h"
#include "data/dataset.h"
#include "comm/device.h"
#include "model/mtp.h"
#include "model/mtp_pass.h"
#include "model/param_init.h"
#include "model/transformer.h"
#include "shard/memory_stats.h"
#include "shard/plan_report.h"
#include "shard/shard_plan.h"
#include "plan/machine_profile.h"
#include "plan/memory_plan.h"
#include "plan/step_time.h"
#include "train/trainer.h"

namespace wmtp {

namespace {

// The device the run will use: [runtime] device; "auto" is a GPU when this machine has one or a
// GPU budget is given (gpu_name, gpu_memory_gib: planning from a login node).
bool plans_cuda(const RuntimeConfig& rc) {
  if (rc.device == RuntimeDevice::Cuda) return true;
  if (rc.device == RuntimeDevice::Cpu) return false;
  return (built_with_cuda() && cuda_device_count() > 0) || !rc.gpu_name.empty() || rc.gpu_memory_gib > 0;
}

// [runtime]'s planning keys, refused when out of range rather than replaced by a default: a budget
// of 0.5 GiB (less than the CUDA context) or 1e30 GiB (an overflow) would judge a plan against a
// number nobody meant.
void check_budget_keys(const RuntimeConfig& rc) {
  constexpr double kMaxGpuGib = 4096, kMaxHostGib = 1 << 20;  // far above any GPU / node there is
  const double context_gib = double(kCudaContextBytes) / double(int64_t(1) << 30);
  if (rc.gpu_memory_gib != 0 && !(rc.gpu_memory_gib > context_gib && rc.gpu_memory_gib <= kMaxGpuGib))
    throw_usage("[runtime] gpu_memory_gib = ", rc.gpu_memory_gib, ": expected 0 (from gpu_name or the visible GPU) or ",
                "a GPU's memory in GiB, above the ", context_gib, " GiB its CUDA context takes and at most ",
                kMaxGpuGib);
  if (rc.host_memory_gib != 0 && !(rc.host_memory_gib > 0 && rc.host_memory_gib <= kMaxHostGib))
    throw_usage("[runtime] host_memory_gib = ", rc.host_memory_gib,
                ": expected 0 (this machine's RAM) or a node's RAM ", "in GiB, above 0 and at most ", kMaxHostGib);
  if (rc.ranks_per_node < 0)
    throw_usage("[runtime] ranks_per_node = ", rc.ranks_per_node, ": expected 0 (the machine profile's; without one ",
                "GPU: min(world size, 8), CPU: the world size) or the number of ranks a node runs");
}

// The per-rank device budget and what it is: [runtime] gpu_memory_gib, gpu_name, the visible GPU;
// on the CPU the node's RAM shared by its ranks.
void set_budgets(const RuntimeConfig& rc, MemoryPlanInput& in) {
  const int64_t gb = int64_t(1) << 30;
  const int64_t node_ram = rc.host_memory_gib > 0 ? int64_t(rc.host_memory_gib * double(gb)) : host_memory_bytes();
  in.host_budget = int64_t(double(node_ram) * kHostUsableFraction);
  if (!in.cuda) {
    in.device_budget = in.host_budget / std::max(1, in.ranks_per_node);
    in.device_name = "the node's RAM (" + format_bytes(node_ram) + ") shared by " + std::to_string(in.ranks_per_node) +
                     " rank(s)";
    return;
  }
  int64_t capacity = 0;
  if (rc.gpu_memory_gib > 0) {
    capacity = int64_t(rc.gpu_memory_gib * double(gb));
    in.device_name = "[runtime] gpu_memory_gib = " + format_bytes(capacity);
  } else if (!rc.gpu_name.empty()) {
    capacity = gpu_capacity_bytes(rc.gpu_name);
    if (capacity == 0)
      throw_usage("[runtime] gpu_name '", rc.gpu_name,
                  "': unknown GPU (H100, H100 NVL, H200, A100-80GB, A100-40GB, L40S); ",
                  "set [runtime] gpu_memory_gib instead");
    in.device_name = rc.gpu_name + " (" + format_bytes(capacity) + ")";
  } else if (built_with_cuda() && cuda_device_count() > 0) {
    const std::string name = device_name(c10::Device(c10::kCUDA, 0));
    capacity = gpu_capacity_bytes(name);
    in.device_name = name + (capacity ? " (" + format_bytes(capacity) + ")" : "");
  }
  if (capacity > 0) in.device_budget = capacity - kCudaContextBytes;
}

void print_line(const char* name, int64_t bytes, const std::string& note = "") {
  printf("  %-34s %12s%s%s\n", name, format_bytes(bytes).c_str(), note.empty() ? "" : "  ", note.c_str());
}

std::string verdict(const MemoryPlan& p) {
  std::string s = "device " + format_bytes(p.device_total);
  if (p.in.device_budget <= 0) s += " (budget unknown)";
  else
    s += p.device_fits() ? " (fits)" : " (> " + format_bytes(p.in.device_budget) + ")";
  s += ", host/node " + format_bytes(p.host_per_node);
  if (p.in.host_budget > 0) s += p.host_fits() ? " (fits)" : " (> " + format_bytes(p.in.host_budget) + ")";
  return s;
}

void print_memory_plan(const MemoryPlan& p, const std::string& peak_phase_note) {
  const MemoryStats& m = p.state;
  const bool off = m.offload != Offload::None, full = m.offload == Offload::Full;
  auto where = [&](bool on_host) { return on_host ? std::string("pinned host (offload)") : std::string(); };
  printf("per-rank memory estimate for one training step (%s):\n", peak_phase_note.c_str());
  print_line("fp32 master shards", m.master_bytes, where(off));
  print_line("fp32 gradient shards", m.grad_bytes, where(full));
  print_line("AdamW state", m.optimizer_bytes, where(off));
  print_line("frozen shards", m.frozen_bytes, where(full));
  if (m.local_grad_bytes) print_line("no_sync accumulators", m.local_grad_bytes);
  if (m.cast_bytes)
    print_line("param_dtype copy", m.cast_bytes, full ? where(true) : "(of the trainable shards, once per step)");
  if (m.staging_bytes) print_line("optimizer staging", m.staging_bytes, where(true));
  for (const MemoryItem& f : p.frozen) print_line(("frozen " + f.name).c_str(), f.bytes, where(full));
  if (p.uploads) print_line("shard uploads (offload full)", p.uploads);
  printf("  %-34s %12s  (%s activation checkpointing; %s: %s)\n", "the step's peak",
         format_bytes(p.peak.total()).c_str(), p.in.checkpointing ? "with" : "without",
         p.in.checkpointing ? "without" : "with", format_bytes(p.activations_other).c_str());
  for (const MemoryItem& i : p.peak.items)
    if (i.bytes) printf("    %-52s %12s\n", i.name.c_str(), format_bytes(i.bytes).c_str());
  if (p.in.cuda) {
    print_line("allocator overhead", p.allocator_overhead, "(a cached block the size of the largest transient)");
  } else {
    print_line("malloc heap kept", p.allocator_overhead, "(freed activations glibc keeps for reuse)");
    print_line("runtime (LibTorch, MPI, data)", p.runtime);
  }
  printf("  %-34s %12s  (%s)\n", "total", format_bytes(p.device_total).c_str(),
         p.in.cuda ? "the caching allocator's reserved peak" : "peak RSS");
}

// The trained model's spec, planned from [model] when its checkpoint does not exist yet.
ModelSpec trained_spec(const PipelineSettings& settings, const Pipeline& pipeline, int64_t data_vocab,
                       std::string* note) {
  const std::string& w = settings.init_weights;
  if (w.empty() || std::filesystem::exists(w)) return pipeline.trained_model(settings, data_vocab);
  PipelineSettings without = settings;
  without.init_weights.clear();
  try {
    ModelSpec spec = pipeline.trained_model(without, data_vocab);
    spec.weights = w;
    *note = "[training] init_weights " + w + " does not exist yet: the architecture comes from [model]";
    return spec;
  } catch (const Error& e) {
    throw_usage("--dry-run: [training] init_weights ", w,
                " does not exist yet, and [model] cannot stand in for it: ", e.what(),
                " (give its architecture: [model] params_json, or dim, n_layers, n_heads, n_kv_heads, ",
                "vocab_size, multiple_of, n_future_tokens)");
  }
}

// The micro-batch this world size allows: the configured one, or (planning another world size) the
// largest smaller one that splits the global batch — named in `note`, since the run needs it set.
int64_t planned_micro_batch(const TrainingConfig& tc, int world_size, std::string* note) {
  const int64_t micro = tc.micro_batch_size;
  if (tc.global_batch_size % (micro * world_size) == 0) return micro;
  int64_t m = std::min<int64_t>(micro, tc.global_batch_size / world_size);
  while (m > 0 && tc.global_batch_size % (m * world_size) != 0) --m;
  if (m <= 0)
    throw_usage("training.global_batch_size ", tc.global_batch_size, " cannot be split over ", world_size,
                " ranks (not a multiple of ", world_size, ")");
  *note = "training.global_batch_size " + std::to_string(tc.global_batch_size) + " is not a multiple of " +
          "micro_batch_size " + std::to_string(micro) + " x " + std::to_string(world_size) +
          " ranks: planned with micro_batch_size " + std::to_string(m) + " (set it so for this world size)";
  return m;
}

MemoryPlanInput memory_plan_input(const TrainerConfigs& cfg, const ModelSpec& trained,
                                  const std::vector<ModelSpec>& frozen, int world_size, int64_t micro,
                                  const MachineProfile* machine) {
  MemoryPlanInput in;
  in.trained = trained;
  in.frozen = frozen;
  in.sharding = cfg.sharding;
  in.world_size = world_size;
  in.cuda = plans_cuda(cfg.runtime);
  in.fused_attention = kFusedAttention;
  in.ranks_per_node = cfg.runtime.ranks_per_node > 0 ? cfg.runtime.ranks_per_node
                      : machine                      ? machine->machine.ranks_per_node
                                                     : (in.cuda ? std::min(world_size, 8) : world_size);
  in.ranks_per_node = std::min(in.ranks_per_node, world_size);
  in.micro_batch = micro;
  in.pairwise = cfg.data.pairwise;
  in.seq = cfg.data.max_length;
  const MtpPassOptions so = mtp_pass_options(cfg.model);
  // A frozen backbone without adapters has nothing to recompute for (train-critic skips it).
  in.checkpointing = so.activation_checkpointing && (trained.lora.enabled || !trained.freeze_base);
  in.sequential = so.sequential_unembedding;
  in.loss_chunk = so.loss_chunk_size;
  set_budgets(cfg.runtime, in);
  return in;
}

// What one transformer block of the trained model saves for backward, by kind.
BlockSaved planned_block(const TrainerConfigs& cfg, const ModelSpec& trained, const MemoryPlanInput& in) {
  MicroBatchShape s;
  s.args = trained.args;
  s.lora = trained.lora;
  s.base_trainable = !trained.lora.enabled && !trained.freeze_base;
  s.rows = in.micro_batch * (cfg.data.pairwise ? 2 : 1);
  s.seq = cfg.data.max_length;
  s.compute_bytes = int64_t(c10::elementSize(cfg.sharding.param_dtype));
  s.fused_attention = in.cuda || in.fused_attention;
  s.cuda = in.cuda;
  return block_saved(s);
}

// Fits, does not fit (with the levers that would make it fit), or no verdict without a device budget.
void print_verdict(const MemoryPlan& mp, const MemoryPlanInput& in) {
  if (mp.in.device_budget <= 0 && mp.host_fits()) {
    // Nothing to judge the device figure against: no verdict rather than a "fits" nobody checked.
    printf("unknown: cannot judge: %s; set [runtime] gpu_name or gpu_memory_gib to judge the device\n",
           verdict(mp).c_str());
  } else if (mp.fits()) {
    printf("fits: %s\n", verdict(mp).c_str());
  } else {
    printf("does not fit: %s. What would make it fit:\n", verdict(mp).c_str());
    for (const MemoryLever& l : memory_levers(in))
      printf("  %-72s %s%s\n", l.what.c_str(), verdict(l.plan).c_str(),
             !l.plan.fits()                ? ""
             : l.plan.in.device_budget > 0 ? "  <- fits"
                                           : "  <- the host fits; the device is unknown");
  }
}

// The time plan of one step on the machine [runtime] machine_profile describes.
StepTimeInput step_time_input(const TrainerConfigs& cfg, const MemoryPlanInput& mem, int64_t accumulation,
                              const MachineProfile& machine) {
  StepTimeInput in;
  in.trained = mem.trained;
  in.frozen = mem.frozen;
  in.sharding = cfg.sharding;
  in.world_size = mem.world_size;
  in.ranks_per_node = mem.ranks_per_node;
  const int groups = planned_group_size(cfg.sharding, mem.world_size, mem.ranks_per_node);
  in.shard_group = groups > 0 ? groups : mem.world_size;
  in.micro_batch = mem.micro_batch;
  in.accumulation = accumulation;
  in.seq = mem.seq;
  in.pairwise = mem.pairwise;
  in.checkpointing = mem.checkpointing;
  in.sequential = mem.sequential;
  in.fused_attention = mem.cuda || mem.fused_attention;
  in.machine = machine;
  return in;
}

// The dry run's last lines: the time plan of a step on [runtime] machine_profile's machine, or how
// to get one.
std::string time_plan_text(const TrainerConfigs& cfg, const MemoryPlanInput& mem, int64_t accumulation,
                           const std::optional<MachineProfile>& machine) {
  if (!machine)
    return "time plan: set [runtime] machine_profile to a machine profile (bin/calibrate-machine measures one; "
           "configs/machines/ holds published ones)\n";
  const StepTimeInput in = step_time_input(cfg, mem, accumulation, *machine);
  return describe_step_time(plan_step_time(in), in);
}

}  // namespace

void print_dry_run(TrainerConfigs cfg, const Pipeline& pipeline, int world_size, const Logger& log) {
  if (world_size < 1) throw_usage("--world-size must be >= 1");
  check_budget_keys(cfg.runtime);
  configure_run(cfg, pipeline);
  int64_t data_vocab = 0;
  if (!cfg.data.train.empty() && std::filesystem::exists(cfg.data.train))
    data_vocab = Dataset::open(cfg.data.train).header().vocab_size;
  std::string weights_note, frozen_note, batch_note;
  const ModelSpec trained = trained_spec(pipeline_settings(cfg), pipeline, data_vocab, &weights_note);
  std::vector<ModelSpec> frozen;
  try {
    frozen = pipeline.frozen_models(pipeline_settings(cfg), data_vocab);
  } catch (const Error& e) {
    frozen_note = std::string("frozen models not planned: ") + e.what();
  }
  const auto& tc = cfg.training;
  const int64_t micro = planned_micro_batch(tc, world_size, &batch_note);
  const int64_t accum = tc.global_batch_size / (micro * world_size);
  const std::optional<MachineProfile> machine = cfg.runtime.machine_profile.empty()
                                                    ? std::nullopt
                                                    : std::optional(load_machine_profile(cfg.runtime.machine_profile));
  const MemoryPlanInput in = memory_plan_input(cfg, trained, frozen, world_size, micro, machine ? &*machine : nullptr);
  const int groups = planned_group_size(cfg.sharding, world_size, in.ranks_per_node);
  ShardPlan plan(planned_param_specs(trained), world_size, groups);
  const MemoryPlan mp = plan_memory(in);

  // Start-up: each rank initializes (or loads) only its shards, through a bounded scratch buffer.
  int64_t frozen_shards = 0;
  for (const MemoryItem& f : mp.frozen) frozen_shards += f.bytes;
  const int64_t init_scratch = kInitScratchElements * 4;
  // (The param_dtype copy is made at the first gather; offloaded state starts on the host.)
  const bool cast_on_device = mp.state.offload != Offload::Full;
  const int64_t startup = mp.state.device_state_bytes() - (cast_on_device ? mp.state.cast_bytes : 0) + frozen_shards +
                          init_scratch + mp.runtime;
  const int64_t startup_host = mp.state.host_state_bytes() - mp.state.staging_bytes -
                               (mp.state.offload == Offload::Full ? mp.state.cast_bytes : 0);

  // Planned on every rank, so that a profile that cannot plan this run fails everywhere alike.
  const std::string time_plan = time_plan_text(cfg, in, accum, machine);

  if (log.rank() != 0) return;
  printf("dry run: %s, %d rank(s), strategy %s, param_dtype %s, reduce_dtype %s, offload %s\n", pipeline.name().c_str(),
         world_size, choice_name(kShardStrategyNames, cfg.sharding.strategy).c_str(),
         shard_dtype_name(cfg.sharding.param_dtype), shard_dtype_name(cfg.sharding.reduce_dtype),
         choice_name(kOffloadNames, cfg.sharding.offload).c_str());
  printf("batch: global %d %s = micro %lld x accumulation %lld x %d ranks; sequences up to %lld tokens\n",
         tc.global_batch_size, cfg.data.pairwise ? "pairs" : "sequences", (long long)micro, (long long)accum,
         world_size, (long long)cfg.data.max_length);
  if (!in.cuda && cfg.runtime.device == RuntimeDevice::Auto)
    printf(
        "note: [runtime] device = \"auto\" plans the CPU here (no GPU visible); set runtime.device=cuda or "
        "runtime.gpu_name to plan a GPU run\n");
  printf("device: %s (%s, %s attention); budget per rank: %s\n", in.cuda ? "cuda" : "cpu",
         shard_dtype_name(cfg.sharding.param_dtype), in.cuda || in.fused_attention ? "fused" : "explicit",
         in.device_budget > 0 ? (format_bytes(in.device_budget) + " of " + in.device_name +
                                 (in.cuda ? ", less 1 GiB outside the caching allocator" : ""))
                                    .c_str()
                              : "unknown (set [runtime] gpu_name or gpu_memory_gib)");
  for (const std::string* note : {&batch_note, &weights_note, &frozen_note})
    if (!note->empty()) printf("note: %s\n", note->c_str());
  printf("\ntrained model: %s\n%s\n", trained.role.c_str(),
         describe_plan(plan, cfg.sharding, /*with_optimizer=*/true).c_str());
  for (const ModelSpec& f : frozen) {
    ShardPlan fplan(planned_param_specs(f), world_size, groups);
    printf("frozen model: %s (%s)\n%s\n", f.role.c_str(), f.weights.c_str(),
           describe_plan(fplan, cfg.sharding, /*with_optimizer=*/false).c_str());
  }
  print_memory_plan(mp, "peak during " + mp.peak.phase);
  const BlockSaved blk = planned_block(cfg, trained, in);
  std::string kinds;
  for (const MemoryItem& i : blk.items())
    if (i.bytes) kinds += (kinds.empty() ? "" : " + ") + i.name + " " + format_bytes(i.bytes);
  printf("  one block saves %s for backward = %s\n", format_bytes(blk.total()).c_str(), kinds.c_str());
  printf("host memory per node (%d rank(s)): %s = %d x (%s%s)%s\n", in.ranks_per_node,
         format_bytes(mp.host_per_node).c_str(), in.ranks_per_node, format_bytes(mp.host_per_rank).c_str(),
         in.cuda ? (": runtime " + format_bytes(mp.host_runtime) + ", offloaded state " +
                    format_bytes(mp.host_per_rank - mp.host_runtime - mp.host_transient) + ", optimizer temporaries " +
                    format_bytes(mp.host_transient))
                       .c_str()
                 : ": the device's figure",
         in.host_budget > 0 ? ("; budget " + format_bytes(in.host_budget) + " (90 % of the node's RAM)").c_str() : "");
  printf(
      "start-up peak per rank: %s (model state and frozen shards + %s init scratch + runtime%s; no rank ever\n"
      "  holds the whole model: %s in fp32)\n",
      format_bytes(startup).c_str(), format_bytes(init_scratch).c_str(),
      startup_host > 0 ? (", beside " + format_bytes(startup_host) + " of offloaded state on the host").c_str() : "",
      format_bytes(4 * (plan.trainable_numel() + plan.frozen_numel())).c_str());
  print_verdict(mp, in);
  printf("\n%s", time_plan.c_str());
  fflush(stdout);
}

}  // namespace wmtp
