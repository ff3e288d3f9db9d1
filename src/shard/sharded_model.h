// ShardedModel: the sharding engine (DESIGN §4) — FSDP / ZeRO-3 semantics over a Communicator, as a
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

// A parameter's part of the rank's local buffer of its unit (the shard, or the replica under no_shard).
struct LocalSegment {
  std::string fqn;
  int64_t local_offset = 0;  // in the local buffer
  int64_t param_offset = 0;  // in the flattened parameter
  int64_t numel = 0;
};

// What the optimizer works on for one unit: fp32 master and gradient of the same size, and which
// part of them this rank owns (the whole shard; under no_shard, slice `rank` of the replica).
struct TrainableShard {
  int unit = 0;
  at::Tensor master;  // 1-D fp32 (requires grad: update it under a NoGradGuard)
  at::Tensor grad;    // 1-D fp32
  std::vector<LocalSegment> segments;
  int64_t owned_begin = 0;
  int64_t owned_numel = 0;
};

class ShardedModel final : public ParamSource, private GradReducer {
 public:
  // No communication: every rank derives the same plan. Parameters start at zero; fill them with
  // load_full or load_pieces. `comm` must outlive the model.
  ShardedModel(const std::vector<ParamSpec>& specs, Communicator& comm, const ShardingConfig& cfg,
               c10::Device device = c10::Device(c10::DeviceType::CPU));
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
  // error; of any dtype). Collective under no_shard (the owned slices are then replicated).
  void load_pieces(const std::vector<TensorPiece>& pieces);
  // This rank's owned ranges (ShardPlan::owned_ranges) of the trainable masters as fp32 views:
  // checkpoints read them, or fill them in place and then call sync_replicas().
  std::vector<TensorPiece> trainable_pieces();
  // The same for frozen parameters, as fp32 copies.
  std::vector<TensorPiece> frozen_pieces() const;
  // After writing into trainable_pieces() views: replicate owned slices (collective under no_shard;
  // a no-op otherwise).
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
  // Completes the step's gradients: under no_sync, reduces the accumulated full gradients into the
  // shards (collective, unit order). Idempotent; the optimizer calls it before clipping and stepping.
  void reduce_gradients();
  // The masters changed (optimizer step, load): gathered copies made earlier are stale.
  void invalidate_gathered();
  std::vector<TrainableShard>& trainable_shards() { return shards_; }

  // ---- facts
  const ShardPlan& plan() const { return plan_; }
  const ShardingConfig& config() const { return cfg_; }
  ShardStrategy strategy() const { return strategy_; }
  Communicator& comm() const { return comm_; }
  c10::Device device() const { return device_; }
  at::ScalarType param_dtype() const { return param_dtype_; }

  // Measured: shards, gradients, no_sync accumulators, gathered buffers (optimizer_bytes = 0; see
  // ShardedAdamW::memory_stats).
  MemoryStats memory_stats() const;
  void reset_peak_memory();

 private:
  struct Unit;
  struct Gathered;
  struct InFlight;
  struct Awaiting {  // a unit instance released after forward, waiting for its backward
    int64_t id = 0;
    int unit = -1;
    std::vector<std::pair<bool, c10::weak_intrusive_ptr<c10::StorageImpl>>> storages;  // (trainable, buffer)
  };

  void reduce_grad(int unit, const at::Tensor& full_grad) override;
  void reduce_into_shard(int unit, const at::Tensor& full_grad);
  int index_of(const std::string& unit) const;
  std::vector<OwnedRange> local_ranges(bool trainable) const;
  int64_t owned_begin(int unit, bool trainable) const;
  Gathered acquire(int unit);
  c10::Storage new_buffer(int unit, bool trainable);
  std::unique_ptr<InFlight> start_fill(int unit, bool trainable, const c10::Storage& target, bool async);
  bool prefetch_outstanding() const;
  void start_forward_prefetch(int unit);
  void drop_forward_prefetch();
  void drop_prefetches();
  void regather(const Awaiting& entry);
  void prefetch_next_backward(int from_unit);
  void note_forward_begin(int unit);
  void replicate(at::Tensor& full_local, int unit, bool trainable);
  void gather_full(std::unordered_map<std::string, at::Tensor>& out, int unit, const FlatLayout& layout,
                   const at::Tensor& local);

  ShardPlan plan_;
  ShardingConfig cfg_;
  ShardStrategy strategy_;
  Communicator& comm_;
  int rank_ = 0, world_ = 1;
  c10::Device device_;
  at::ScalarType param_dtype_, reduce_dtype_;
  std::vector<Unit> units_;
  std::unordered_map<std::string, int> index_;
  std::vector<TrainableShard> shards_;
  std::shared_ptr<GatherMemory> memory_;
  at::Tensor anchor_;  // empty leaf that requires grad: makes every gather record a GatherFn node

  // Prefetch. Forward: the order of forward begin_unit calls is recorded and replayed to predict the
  // next unit. Backward: units freed after forward await their backward, newest first.
  std::vector<int> fwd_sequence_;
  size_t fwd_pos_ = 0;
  int fwd_pending_unit_ = -1;
  std::vector<std::unique_ptr<InFlight>> fwd_pending_;
  std::vector<Awaiting> awaiting_;
  int64_t next_awaiting_id_ = 0;
  std::vector<std::unique_ptr<InFlight>> bwd_pending_;
  int bwd_prefetch_from_ = -1, bwd_prefetch_to_ = -1;
  std::set<std::pair<int, int>> bwd_no_prefetch_;
};

}  // namespace wmtp
