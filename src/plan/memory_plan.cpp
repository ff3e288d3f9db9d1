// MemoryPlan: per-rank device memory and per-node host memory of a planned run, and the levers.
#include "plan/memory_plan.h"

#include <algorithm>
#include <cctype>

#include <torch/version.h>

#include "core/choice_names.h"
#include "comm/shard_groups.h"
#include "model/mtp.h"
#include "shard/shard_plan.h"

namespace wmtp {

namespace {

// Peak RSS of a CPU rank beyond its tensors: LibTorch, MPI, HDF5, the dataset's index — measured on
// the tiny config with glibc's heap held to the live bytes (MALLOC_MMAP_THRESHOLD_=131072): 228 MiB
// peak RSS less 39 MiB of tensors (docs/sharding.md, "Dry run").
constexpr int64_t kCpuRuntimeBytes = int64_t(190) << 20;
// Host RSS of a GPU rank without offloaded state: the CUDA libraries, LibTorch, MPI, pinned batch
// buffers (measured: 1.58 GiB, the 1B bench on an H100).
constexpr int64_t kGpuHostRuntimeBytes = int64_t(1.58 * double(int64_t(1) << 30));
// Freed heap memory glibc keeps at a CPU rank's peak, as a fraction of the blocks' heap-served saved
// activations: the forward lays them out, the backward frees them while its gradients take the holes.
// Measured on bench-small as peak RSS less the same run's peak with the heap held to the live bytes
// (MALLOC_MMAP_THRESHOLD_=131072): 0.50 of a set at np 1, 0.58 at np 2 (docs/sharding.md, "Dry run").
// It was about one whole set while the loss still made [rows, V] temporaries between them.
constexpr double kCpuHeapKeptFraction = 0.5;

// The largest block (a trunk layer or an extra head): its trainable elements, and its frozen ones
// too when `gathered` (a gather brings both).
int64_t largest_block(const ShardPlan& plan, bool gathered) {
  int64_t n = 0;
  for (const UnitPlan& u : plan.units())
    if (u.name.rfind("layers.", 0) == 0 || u.name.rfind("extra_heads.", 0) == 0)
      n = std::max(n, u.trainable.padded_numel + (gathered ? u.frozen.padded_numel : 0));
  return n;
}

int64_t unit_trainable(const ShardPlan& plan, const std::string& name) {
  for (const UnitPlan& u : plan.units())
    if (u.name == name) return u.trainable.padded_numel;
  return 0;
}

int64_t largest_shard(const ShardPlan& plan, bool replicated) {
  int64_t n = 0;
  for (const UnitPlan& u : plan.units())
    n = std::max(n, replicated ? u.trainable.padded_numel : u.trainable.group_shard_numel);
  return n;
}

int64_t unit_gathered(const ShardPlan& plan, const std::string& name) {
  for (const UnitPlan& u : plan.units())
    if (u.name == name) return u.trainable.padded_numel + u.frozen.padded_numel;
  return 0;
}

// plan_memory's parts, in the order it calls them (defined after it).
MicroBatchShape micro_batch_shape(const MemoryPlanInput& in, const MemoryPlan& p, const ShardPlan& plan, int64_t es);
void add_totals(const MemoryPlanInput& in, const ShardPlan& plan, const MicroBatchShape& s, int64_t frozen_device,
                int64_t frozen_host, MemoryPlan& p);

}  // namespace

int64_t gpu_capacity_bytes(const std::string& name) {
  std::string n;
  for (char ch : name) n += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  const double gib = double(int64_t(1) << 30);
  // What cudaMemGetInfo reports (the caching allocator's "total capacity" in its OOM message).
  if (has("H200")) return int64_t(139.8 * gib);
  if (has("H100") && (has("NVL") || has("94"))) return int64_t(93.1 * gib);
  if (has("H100")) return int64_t(79.1 * gib);
  if (has("A100") && has("40")) return int64_t(39.4 * gib);
  if (has("A100")) return int64_t(79.2 * gib);
  if (has("L40")) return int64_t(44.4 * gib);
  return 0;
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  MemoryPlan p;
  p.in = in;
  const ShardingConfig& sc = in.sharding;
  const int64_t es = int64_t(c10::elementSize(sc.param_dtype));
  const int groups = planned_group_size(sc, in.world_size, in.ranks_per_node);
  const ShardPlan plan(planned_param_specs(in.trained), in.world_size, groups);
  p.state = estimate_memory(plan, sc, /*with_optimizer=*/true);

  // Offload "full": each gather first uploads the unit's shard (the gathers in flight at once).
  if (p.state.offload == Offload::Full && sc.strategy != ShardStrategy::NoShard)
    p.uploads = (1 + sc.effective_prefetch_depth()) * es * plan.max_unit_gathered_numel() / plan.group_size();

  int64_t frozen_device = 0, frozen_host = 0;
  for (const ModelSpec& f : in.frozen) {
    const ShardPlan fplan(planned_param_specs(f), in.world_size, groups);
    const MemoryStats fs = estimate_memory(fplan, sc, /*with_optimizer=*/false);
    p.frozen.push_back({f.role, fs.frozen_bytes});
    (p.state.offload == Offload::Full ? frozen_host : frozen_device) += fs.frozen_bytes;
  }

  const MicroBatchShape s = micro_batch_shape(in, p, plan, es);
  p.peak = activation_peak(s);
  for (const MemoryItem& i : p.peak.items)
    if (i.name.rfind("gathered", 0) == 0) p.gathered = i.bytes;
  MicroBatchShape other = s;
  other.checkpointing = !s.checkpointing;
  p.activations_other = activation_peak(other).total();

  add_totals(in, plan, s, frozen_device, frozen_host, p);
  return p;
}

namespace {

// The shape of a micro-batch's step as the activation model sees it.
MicroBatchShape micro_batch_shape(const MemoryPlanInput& in, const MemoryPlan& p, const ShardPlan& plan, int64_t es) {
  const ShardingConfig& sc = in.sharding;
  const bool value = in.trained.value_head.enabled;
  MicroBatchShape s;
  s.args = in.trained.args;
  s.lora = in.trained.lora;
  s.base_trainable = !in.trained.frozen && !in.trained.lora.enabled && !in.trained.freeze_base;
  s.value_head = value;
  s.rows = in.micro_batch * (in.pairwise ? 2 : 1);
  s.seq = in.seq;
  s.compute_bytes = es;
  s.fused_attention = in.cuda || in.fused_attention;
  s.cuda = in.cuda;
  s.checkpointing = in.checkpointing;
  s.sequential = in.sequential;
  s.loss_chunk = in.loss_chunk;
  s.unit_elements = largest_block(plan, /*gathered=*/false);
  s.output_elements = value ? 0 : unit_trainable(plan, "output");
  s.reduce_bytes = int64_t(c10::elementSize(sc.reduce_dtype));
  s.world_size = in.world_size;
  s.async_reduce = sc.async_reduce;
  s.embedding_trains = s.base_trainable;
  // Gathered units (full_shard: per phase, sharded_model_gather.cpp; the last trunk block is pinned
  // by run_models.cpp under sequential unembedding; shard_grad_op: all of them; no_shard: none; the
  // hybrid strategies as their in-group counterparts). Replicated (no_shard, one rank, groups of
  // one) the model computes on its own buffers and gathers nothing, except under offload "full",
  // whose shards are uploaded into gather buffers.
  const bool gathers = !(plan.group_size() == 1 || sc.strategy == ShardStrategy::NoShard) ||
                       p.state.offload == Offload::Full;
  switch (gathers ? sc.strategy : ShardStrategy::NoShard) {
    case ShardStrategy::FullShard:
    case ShardStrategy::HybridShard:
      s.gathered_block = es * largest_block(plan, /*gathered=*/true);
      s.gathered_output = value ? 0 : es * unit_gathered(plan, "output");
      s.prefetch_depth = sc.effective_prefetch_depth();
      s.pinned_trunk_block = !in.trained.frozen && !value && in.sequential && in.trained.args.n_trunk_blocks() > 0;
      break;
    case ShardStrategy::ShardGradOp:
    case ShardStrategy::HybridShardGradOp: s.gathered_all = p.state.peak_gathered_bytes; break;
    case ShardStrategy::NoShard: break;
  }
  s.mean_keeps_input = !in.cuda && TORCH_VERSION_MAJOR < 2;  // GPU runs use LibTorch 2.x
  return s;
}

// Per rank on the device and the host, per node on the host: the parts above plus what the allocator
// and the runtime keep.
void add_totals(const MemoryPlanInput& in, const ShardPlan& plan, const MicroBatchShape& s, int64_t frozen_device,
                int64_t frozen_host, MemoryPlan& p) {
  const ShardingConfig& sc = in.sharding;
  // GPU: the caching allocator keeps freed blocks; at the peak about one the size of the largest
  // transient is cached beside the live ones. CPU: glibc's heap keeps part of the blocks' heap-served
  // saved activations (ActivationPeak::heap_bytes, kCpuHeapKeptFraction).
  p.allocator_overhead = in.cuda ? largest_transient(s) : int64_t(kCpuHeapKeptFraction * double(p.peak.heap_bytes()));
  p.runtime = in.cuda ? 0 : kCpuRuntimeBytes;
  p.device_total = p.state.device_state_bytes() + frozen_device + p.peak.total() + p.uploads + p.allocator_overhead +
                   p.runtime;
  // Offload: the host's transients beside its state — two fp32 copies of the largest run, kept as a
  // margin (the op-chain AdamW allocated them; adamw_update's host loop allocates none, so this
  // over-states by that much) and, under "full", a reduced gradient shard downloaded before it is
  // added into the host gradient.
  if (p.state.offload != Offload::None) {
    const int64_t largest = largest_shard(plan, sc.strategy == ShardStrategy::NoShard);
    p.host_transient = 8 * largest + (p.state.offload == Offload::Full ? 4 * largest : 0);
  }
  if (in.cuda) {
    p.host_runtime = kGpuHostRuntimeBytes;
    p.host_per_rank = p.host_runtime + p.state.host_state_bytes() + frozen_host + p.host_transient;
  } else {
    p.host_per_rank = p.device_total + p.state.host_state_bytes() + frozen_host;  // the device is the host
  }
  p.host_per_node = p.host_per_rank * in.ranks_per_node;
}

MemoryPlanInput with_world(MemoryPlanInput in, int world) {
  // Per node as many ranks as before (up to the new world size); the global batch stays.
  in.ranks_per_node = std::min(world, in.ranks_per_node);
  in.world_size = world;
  return in;
}

}  // namespace

std::vector<MemoryLever> memory_levers(const MemoryPlanInput& in) {
  std::vector<MemoryLever> out;
  const MemoryPlan base = plan_memory(in);
  // More ranks: shards shrink, activations do not.
  for (int w = in.world_size * 2; w <= 4096; w *= 2) {
    MemoryPlan p = plan_memory(with_world(in, w));
    if (p.fits()) {
      out.push_back({std::to_string(w) + " ranks (" + std::to_string(p.in.ranks_per_node) + " per node)", p});
      break;
    }
  }
  if (!in.checkpointing) {
    MemoryPlanInput c = in;
    c.checkpointing = true;
    out.push_back({"activation checkpointing ([model] activation_checkpointing = true)", plan_memory(c)});
  }
  for (int64_t m = in.micro_batch / 2; m >= 1; m /= 2) {
    MemoryPlanInput c = in;
    c.micro_batch = m;
    MemoryPlan p = plan_memory(c);
    if (p.fits() || m == 1) {
      out.push_back({"micro-batch " + std::to_string(m) + " ([training] micro_batch_size; more accumulation)", p});
      break;
    }
  }
  const bool sharded = in.sharding.strategy != ShardStrategy::NoShard;
  if (sharded)
    for (Offload mode : {Offload::Optimizer, Offload::Full}) {
      if (in.sharding.offload == mode) continue;
      MemoryPlanInput c = in;
      c.sharding.offload = mode;
      out.push_back({"offload \"" + choice_name(kOffloadNames, mode) + "\" ([sharding] offload)", plan_memory(c)});
    }
  const bool any = std::any_of(out.begin(), out.end(), [](const MemoryLever& l) { return l.plan.fits(); });
  if (!any && !base.fits()) {
    // Everything that lowers the device figure at once, then the fewest ranks that fit.
    MemoryPlanInput c = in;
    c.checkpointing = true;
    c.micro_batch = 1;
    if (sharded) c.sharding.offload = Offload::Optimizer;
    for (int w = in.world_size; w <= 4096; w *= 2) {
      MemoryPlan p = plan_memory(with_world(c, w));
      for (Offload mode : {Offload::Optimizer, Offload::Full}) {
        if (!sharded) break;
        MemoryPlanInput o = with_world(c, w);
        o.sharding.offload = mode;
        MemoryPlan q = plan_memory(o);
        if (q.fits()) {
          p = q;
          break;
        }
      }
      if (p.fits()) {
        const std::string offload = sharded ? ", offload \"" + choice_name(kOffloadNames, p.in.sharding.offload) + "\""
                                            : std::string();
        out.push_back(
            {"together: activation checkpointing, micro-batch 1" + offload + ", " + std::to_string(w) + " ranks", p});
        break;
      }
    }
  }
  return out;
}

int planned_group_size(const ShardingConfig& sc, int world_size, int ranks_per_node) {
  if (!is_hybrid(sc.strategy)) return 0;
  // Nodes of ranks_per_node ranks (the last one holding the rest), checked as a run's hosts are.
  std::vector<std::string> hosts;
  for (int r = 0; r < world_size; ++r) hosts.push_back("node" + std::to_string(r / std::max(1, ranks_per_node)));
  return plan_groups(sc.shard_group_size, hosts).group_size;
}

std::vector<ParamSpec> planned_param_specs(const ModelSpec& spec) {
  MtpModel model(spec.args, spec.lora, spec.value_head, spec.freeze_base);
  std::vector<ParamSpec> specs = model.param_specs();
  if (spec.frozen)
    for (auto& p : specs) p.trainable = false;
  return specs;
}

}  // namespace wmtp
