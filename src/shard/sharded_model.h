// ShardedModel: the sharding engine (docs/sharding.md) — FSDP / ZeRO-3 semantics over a Communicator, as a
// ParamSource the functional model draws its weights from.
//
// Per unit (ShardPlan) this rank holds an fp32 master shard of the trainable parameters, its fp32
// gradient, and a param_dtype shard of the frozen ones (no_shard: full replicas). begin_unit gathers
// the unit's flat buffers in param_dtype and returns per-parameter views; the trainable buffer enters
// autograd through GatherFn, whose backward reduce-scatters the flat gradient (in reduce_dtype, as a
// sum) into the shard gradient. end_unit, under full_shard with a graph, releases the buffers'
// memory while autograd still holds the views and hooks the unit's output so the memory is
// re-gathered (without touching the views' version counter) just before the unit's backward.
// Under shard_grad_op the graph keeps the buffers from forward to backward; no_shard keeps replicas.
// Hybrid (hybrid_shard, hybrid_shard_grad_op; comm/shard_groups.h): the same inside this rank's group
// of S ranks — gathers and reduce-scatters on the group communicator, the rank holding a group shard
// (shard_plan.h) — and, once per optimizer step in reduce_gradients(), after the last micro-batch,
// one all-reduce of the gradient shard across the R replicas (beyond two a reduce-scatter then an
// all-gather, so that every replica gets the same bits and the replicas never drift apart). Each replica then
// applies the same AdamW update to its whole group shard.
// Offload ([sharding] offload): the fp32 masters (and, "full", the gradients and param_dtype shards)
// live in pinned host memory; the device keeps what the step computes with (docs/sharding.md).
//
// Collective discipline: begin_unit/end_unit, the backward pass, reduce_gradients, load_pieces and
// full_params are collective — every rank runs the same units in the same order (even a rank whose
// micro-batch has no valid tokens). Threads: forward calls come from one thread, backward work from
// the autograd thread; the two never overlap. The engine must outlive every graph it took part in.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/param_source.h"
#include "shard/gather_fn.h"
#include "shard/memory_stats.h"
#include "core/tensor_piece.h"
#include "shard/shard_plan.h"
#include "shard/sharding_config.h"

namespace wmtp {

class Communicator;
class GatherMemory;
struct ShardGroups;
class PhaseTimer;

// A parameter's part of the rank's local buffer of its unit (the shard, the group shard under a hybrid
// strategy, or the replica under no_shard).
struct LocalSegment {
  std::string fqn;
  int64_t local_offset = 0;  // in the local buffer
  int64_t param_offset = 0;  // in the flattened parameter
  int64_t numel = 0;
};

// What the optimizer works on for one unit: fp32 master and gradient of the same size, and which
// part of them this rank owns (the whole shard; under no_shard slice `rank` of the replica, under a
// hybrid strategy its replica's slice of the group shard: owned_slice()).
struct TrainableShard {
  int unit = 0;
  at::Tensor master;  // 1-D fp32 (requires grad: update it under a NoGradGuard); on the host when offloaded
  at::Tensor grad;    // 1-D fp32, where the reductions land (the host under offload "full")
  std::vector<LocalSegment> segments;
  int64_t owned_begin = 0;
  int64_t owned_numel = 0;
};

class ShardedModel final : public ParamSource, private GradReducer {
 public:
  // No communication: every rank derives the same plan. Parameters start at zero; fill them with
  // load_full or load_pieces. `comm` (every rank) and `groups` must outlive the model; a hybrid
  // strategy needs `groups` (made over the same world: make_shard_groups), the others ignore it.
  ShardedModel(const std::vector<ParamSpec>& specs, Communicator& comm, const ShardingConfig& cfg,
               c10::Device device = c10::Device(c10::DeviceType::CPU), const ShardGroups* groups = nullptr);
  ~ShardedModel() override;
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  // ---- parameter values
  // Fills every element this rank holds (trainable masters and frozen shards; whole replicas under
  // no_shard) by calling `fn(fqn, offset, out)` per owned range: `out` is the 1-D slice of the local
  // buffer (fp32 master or param_dtype frozen, on the engine's device) that must receive elements
  // [offset, offset + out.numel()) of the flattened parameter. No communication, and no full tensor:
  // with a counter-based generator (MtpModel::init_range) start-up memory is the shards only.
  using InitFn = std::function<void(const std::string& fqn, int64_t offset, const at::Tensor& out)>;
  void init_shards(const InitFn& fn);
  // Each rank copies what it holds from full tensors (every spec's FQN required, shapes checked;
  // e.g. init_params(seed) run identically on every rank). No communication.
  void load_full(const std::unordered_map<std::string, at::Tensor>& full);
  // Copies the overlap of each piece with what this rank owns (pieces of unknown FQNs are an
  // error; of any dtype). Collective under no_shard and hybrid (the owned slices are then replicated).
  void load_pieces(const std::vector<TensorPiece>& pieces);
  // This rank's owned ranges (ShardPlan::owned_ranges) of the trainable masters as fp32 views:
  // checkpoints read them, or fill them in place and then call sync_replicas().
  std::vector<TensorPiece> trainable_pieces();
  // The same for frozen parameters, as fp32 copies.
  std::vector<TensorPiece> frozen_pieces() const;
  // After writing into trainable_pieces() views: replicate owned slices (collective under no_shard
  // and hybrid; a no-op otherwise).
  void sync_replicas();
  // Full fp32 tensors of every parameter on every rank (collective; tests, export, evaluation).
  std::unordered_map<std::string, at::Tensor> full_params(bool include_frozen = true);
  // Full fp32 gradients of the trainable parameters (collective; call after reduce_gradients).
  std::unordered_map<std::string, at::Tensor> full_grads();

  // ---- ParamSource
  UnitParams begin_unit(const std::string& unit) override;
  void end_unit(const std::string& unit, const at::Tensor& output) override;

  // ---- gradients
  // Zeroes shard gradients and no_sync accumulators; drops stale prefetches.
  void zero_grad();
  // Completes the step's gradients: waits for reduce-scatters still in flight (async_reduce) and,
  // under no_sync, reduces the accumulated full gradients into the shards (collective, unit order);
  // under a hybrid strategy then all-reduces the gradient shards across the replicas, once per step:
  // a backward after it (before zero_grad) is refused. Idempotent; the optimizer calls it before
  // clipping and stepping.
  void reduce_gradients();
  // The masters changed (optimizer step, load): gathered copies made earlier (prefetches, kept
  // buffers, the param_dtype copy of the masters) are stale.
  void invalidate_gathered();
  std::vector<TrainableShard>& trainable_shards() { return shards_; }

  // ---- offload: the optimizer's side (sharded_model_offload.cpp)
  Offload offload() const { return offload_; }
  // The fp32 gradient of trainable_shards()[i] where the optimizer steps: the shard gradient itself,
  // or (offload "optimizer") its copy in pinned host staging — the copy of shard i + 1 is started
  // before waiting for shard i's, so the downloads overlap the CPU's update. Valid until the next
  // call.
  at::Tensor optimizer_grad(size_t i);
  // The optimizer changed trainable_shards()[i].master. Offload: its param_dtype copy is made on
  // the host now and (offload "optimizer") copied up without waiting, so the next step's gathers find
  // it on the device and the upload overlaps the update of the next shards. Without offload the copy
  // is made at the next gather (invalidate_gathered()).
  void masters_changed(size_t i);

  // ---- gathering policy
  // reshard = false: this unit's gathered buffers are not freed after its forward (FSDP's
  // reshard_after_forward = False) — for a unit whose backward follows soon, such as the last trunk
  // block under sequential unembedding — and a forward without grad keeps them for the recompute.
  // Costs one unit of memory while the unit waits.
  void set_reshard_after_forward(const std::string& unit, bool reshard);

  // ---- timing
  // The step's phase timer (core/phase_timer.h), or null: the engine marks allgather_wait (waiting
  // for a unit's gathered buffers: blocking gathers, prefetches, re-gathers) and reduce_scatter_wait
  // (waiting for a gradient reduction). Must outlive the engine's use of it.
  void set_phase_timer(PhaseTimer* timer) { phases_ = timer; }
  PhaseTimer* phase_timer() const { return phases_; }

  // ---- facts
  const ShardPlan& plan() const { return plan_; }
  const ShardingConfig& config() const { return cfg_; }
  ShardStrategy strategy() const { return strategy_; }
  Communicator& comm() const { return comm_; }  // every rank
  // The ranks holding the same elements as this one, over which owned slices are replicated: every
  // rank under no_shard, the replicas under a hybrid strategy; null when this rank's are its own.
  Communicator* replica_comm() const { return replica_comm_; }
  // The slice of every flat buffer this rank owns (ShardPlan::owned_ranges' `rank`): its part of
  // checkpoints and of the gradient norm.
  int owned_slice() const { return owned_slice_; }
  c10::Device device() const { return device_; }
  at::ScalarType param_dtype() const { return param_dtype_; }

  // Measured: shards, gradients, no_sync accumulators, gathered buffers (optimizer_bytes = 0; see
  // ShardedAdamW::memory_stats).
  MemoryStats memory_stats() const;
  void reset_peak_memory();
  // What the engine did since construction or reset_counters() (tests, benches, logs).
  struct Counters {
    int64_t gathers = 0;          // unit buffers gathered for begin_unit (prefetched or not)
    int64_t prefetched = 0;       // of those and of the re-gathers, started ahead of need
    int64_t regathers = 0;        // released buffers filled again for a backward
    int64_t kept = 0;             // buffers not freed after forward because the backward came next
    int64_t reduce_scatters = 0;  // gradient reductions posted (blocking or not)
    int64_t param_casts = 0;      // param_dtype copies of a unit's master shard
    int64_t dropped_prefetches = 0;
    int64_t buffer_allocations = 0;  // gathered buffers freshly allocated (since construction)
    int64_t buffer_reuses = 0;       // served from the cache of released buffers (since construction)
  };
  Counters counters() const;
  void reset_counters() { counters_ = Counters{}; }

 private:
  struct Unit;
  struct Gathered;
  struct Fill;
  struct Prefetch;
  struct Awaiting;
  struct PendingReduce;
  struct Staging;
  struct UnitSequence {  // the order of begin_unit calls of one kind, recorded and replayed
    std::vector<int> order;
    size_t pos = 0;
    void note(int unit);
  };

  void reduce_grad(int unit, const at::Tensor& full_grad) override;
  void reduce_into_shard(int unit, const at::Tensor& full_grad);
  void finish_reduce(PendingReduce& r);
  void finish_reductions();
  int index_of(const std::string& unit) const;
  // Every rank holds whole units: no_shard, a single rank, or groups of one. Gathering is then a view
  // of the local buffer (or of its param_dtype copy) and nothing is freed, re-gathered or prefetched.
  bool replicated() const;
  int64_t held_numel(const FlatLayout& l) const { return l.shard_numel * held_slices_; }
  void reduce_replicas();
  std::vector<OwnedRange> local_ranges(bool trainable) const;
  int64_t owned_begin(int unit, bool trainable) const;
  at::Tensor gather_source(int unit, bool trainable);
  at::Tensor offloaded_cast(int unit);
  void fill_cast(int unit, size_t slot, bool wait);
  at::Tensor upload(const at::Tensor& host) const;
  at::Tensor to_host(const at::Tensor& t) const;
  void start_grad_download(size_t i);
  Gathered acquire(int unit);
  c10::Storage new_buffer(int unit, bool trainable);
  Fill start_fill(int unit, bool trainable, const c10::Storage& target, bool async);
  int prefetch_depth() const;
  bool take_prefetched(int unit, bool backward, Gathered& g);
  void prefetch_begins(int unit, bool backward);
  void prefetch_regathers(int from_unit);
  void release_kept(int except_unit);
  void drop_prefetches();
  void regather(const Awaiting& entry);
  void replicate(at::Tensor& local, int unit, bool trainable);
  void gather_full(std::unordered_map<std::string, at::Tensor>& out, int unit, const FlatLayout& layout,
                   const at::Tensor& local);

  ShardPlan plan_;
  ShardingConfig cfg_;
  ShardStrategy strategy_;
  Communicator& comm_;
  Communicator& group_;                   // gathers and reduce-scatters: every rank unless hybrid
  Communicator* replica_comm_ = nullptr;  // see replica_comm()
  bool hybrid_ = false;
  int rank_ = 0, world_ = 1;
  // This rank's local buffers hold slices [first_slice_, first_slice_ + held_slices_) of each flat
  // buffer; it owns slice owned_slice_ (shard_plan.h).
  int first_slice_ = 0, held_slices_ = 1, owned_slice_ = 0;
  bool replicas_reduced_ = false;  // hybrid: this step's gradients were all-reduced
  c10::Device device_;
  at::ScalarType param_dtype_, reduce_dtype_;
  Offload offload_;
  std::vector<Unit> units_;
  std::unordered_map<std::string, int> index_;
  std::vector<TrainableShard> shards_;
  std::shared_ptr<GatherMemory> memory_;
  at::Tensor anchor_;  // empty leaf that requires grad: makes every gather record a GatherFn node
  Counters counters_;
  PhaseTimer* phases_ = nullptr;

  // Prefetch: the orders of forward begin_unit calls and of backward ones (recomputes under
  // activation checkpointing) are recorded and replayed to predict the next units; units freed
  // after forward await their backward, newest first. At most prefetch_depth() units are in flight.
  UnitSequence fwd_seq_, bwd_seq_;
  std::vector<Prefetch> pending_;  // oldest first
  std::vector<Awaiting> awaiting_;
  int64_t next_awaiting_id_ = 0;
  std::pair<int, int> last_regather_prediction_{-1, -1};  // (from, predicted next) of the last hook
  std::set<std::pair<int, int>> bwd_no_prefetch_;
  // Keeping gathered buffers: begin_events_ counts begin_unit calls; a unit whose backward (hook or
  // recompute) came with no other unit begun since its end_unit is learned as "immediate".
  int64_t begin_events_ = 0;
  std::vector<PendingReduce> reductions_;  // async_reduce: reduce-scatters in flight, oldest first
  std::unique_ptr<Staging> staging_;       // offload "optimizer": pinned host buffers of the step
};

}  // namespace wmtp
