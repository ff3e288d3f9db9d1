// ShardedModel: shards, parameter values (init, load, pieces), gradient reduction, memory figures.
// Gathering, freeing and prefetching live in sharded_model_gather.cpp.
#include "shard/sharded_model.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <unordered_set>

#include "core/choice_names.h"
#include "core/error.h"
#include "core/phase_timer.h"
#include "comm/communicator.h"
#include "comm/device.h"
#include "comm/shard_groups.h"
#include "shard/gather_memory.h"
#include "shard/sharded_model_internal.h"


namespace wmtp {

namespace {

std::vector<int64_t> split_sizes(const FlatLayout& l) {
  std::vector<int64_t> s;
  for (const ParamSlot& p : l.params) s.push_back(p.numel);
  if (l.padding() > 0) s.push_back(l.padding());
  return s;
}

// async_reduce: reduce-scatters in flight at once (each holds a unit's full gradient).
constexpr size_t kMaxPendingReduces = 2;

}  // namespace

namespace {

// The communicator gathers and reduce-scatters run on: the group's under a hybrid strategy.
Communicator& group_comm(Communicator& world, const ShardingConfig& cfg, const ShardGroups* groups) {
  cfg.validate();
  if (!is_hybrid(cfg.strategy)) return world;
  if (!groups)
    throw_usage("[sharding] strategy = \"", choice_name(kShardStrategyNames, cfg.strategy),
                "\" needs the group and replica communicators (comm/shard_groups.h), which this program does not make");
  WMTP_CHECK(groups->layout.world_size == world.size(), "sharding engine: shard groups of a ",
             groups->layout.world_size, "-rank world for a communicator of ", world.size());
  return *groups->group;
}

}  // namespace

ShardedModel::ShardedModel(const std::vector<ParamSpec>& specs, Communicator& comm, const ShardingConfig& cfg,
                           c10::Device device, const ShardGroups* groups)
    : plan_(specs, comm.size(), is_hybrid(cfg.strategy) && groups ? groups->layout.group_size : 0),
      cfg_(cfg),
      strategy_(cfg.strategy),
      comm_(comm),
      group_(group_comm(comm, cfg, groups)),
      hybrid_(is_hybrid(cfg.strategy)),
      rank_(comm.rank()),
      world_(comm.size()),
      device_(device),
      param_dtype_(cfg.param_dtype),
      reduce_dtype_(cfg.reduce_dtype),
      offload_(cfg.offload) {
  const bool replicated = strategy_ == ShardStrategy::NoShard;
  if (offload_ != Offload::None && replicated)
    throw_usage("[sharding] offload = \"", choice_name(kOffloadNames, cfg.offload),
                "\" needs a sharded strategy (full_shard, shard_grad_op or a hybrid one): ",
                "under no_shard every rank holds the whole model and its replicas are kept in step on the device");
  // Which slices of each flat buffer this rank holds and owns (shard_plan.h).
  owned_slice_ = rank_;
  if (replicated) {
    first_slice_ = 0, held_slices_ = world_;
    if (world_ > 1) replica_comm_ = &comm_;
  } else if (hybrid_) {
    const int replicas = plan_.replicas(), place = group_.rank(), group = groups->replica->rank();
    first_slice_ = place * replicas, held_slices_ = replicas, owned_slice_ = place * replicas + group;
    if (replicas > 1) replica_comm_ = groups->replica.get();
  } else {
    first_slice_ = rank_, held_slices_ = 1;
  }
  memory_ = std::make_shared<GatherMemory>(static_cast<int>(plan_.units().size()));
  anchor_ = at::empty({0}, at::TensorOptions().dtype(at::kFloat).device(device_));
  anchor_.requires_grad_(true);
  // Offloaded state lives in pinned host memory (ordinary memory when the device is the CPU: the
  // buffers are still separate from the device's, so the copies between them run in CPU tests too).
  auto zeros = [&](int64_t n, at::ScalarType dtype, bool on_host) {
    if (!on_host) return at::zeros({n}, at::TensorOptions().dtype(dtype).device(device_));
    return pinned_host_empty(n, dtype, device_).zero_();
  };
  const bool host_master = offload_ != Offload::None, host_rest = offload_ == Offload::Full;
  const int64_t owned_offset = int64_t(owned_slice_ - first_slice_);
  units_.resize(plan_.units().size());
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    u.plan = &plan_.units()[i];
    index_[u.plan->name] = static_cast<int>(i);
    const FlatLayout& t = u.plan->trainable;
    const FlatLayout& f = u.plan->frozen;
    const int64_t local_t = held_numel(t), local_f = held_numel(f);
    u.master = zeros(local_t, at::kFloat, host_master);
    u.grad = zeros(local_t, at::kFloat, host_rest);
    u.frozen = zeros(local_f, param_dtype_, host_rest);
    u.t_split = split_sizes(t);
    u.f_split = split_sizes(f);
    if (t.empty()) continue;
    TrainableShard s;
    s.unit = static_cast<int>(i);
    s.master = u.master;
    s.grad = u.grad;
    s.owned_begin = owned_offset * t.shard_numel;
    s.owned_numel = t.shard_numel;
    for (const OwnedRange& r : local_ranges(true))
      if (r.unit == s.unit) s.segments.push_back(LocalSegment{r.fqn, r.shard_offset, r.param_offset, r.numel});
    shards_.push_back(std::move(s));
  }
}

ShardedModel::~ShardedModel() {
  try {
    drop_prefetches();
    for (PendingReduce& r : reductions_) r.work->wait();
  } catch (...) {
    // A failed wait cannot be reported from a destructor; the next collective fails loudly.
  }
}

bool ShardedModel::replicated() const { return strategy_ == ShardStrategy::NoShard || group_.size() == 1; }

int ShardedModel::index_of(const std::string& unit) const {
  auto it = index_.find(unit);
  if (it == index_.end())
    throw_runtime("sharding engine: unknown unit '", unit, "' (not in the model's parameter specs)");
  return it->second;
}

// What this rank stores: its shard, its group's shard (hybrid), or every parameter whole (no_shard).
std::vector<OwnedRange> ShardedModel::local_ranges(bool trainable) const {
  return plan_.slice_ranges(first_slice_, held_slices_, trainable);
}

// Where the owned slice starts in the local buffer.
int64_t ShardedModel::owned_begin(int unit, bool trainable) const {
  const UnitPlan& p = plan_.unit(unit);
  return int64_t(owned_slice_ - first_slice_) * (trainable ? p.trainable.shard_numel : p.frozen.shard_numel);
}

// ---------------------------------------------------------------------------------------------
// parameter values

namespace {
const ParamSpec& find_spec(const ShardPlan& plan, const std::string& fqn) {
  for (const ParamSpec& s : plan.specs())
    if (s.fqn == fqn) return s;
  throw_input("sharding engine: parameter '", fqn, "' is not in the model's specs");
}
}  // namespace

void ShardedModel::load_full(const std::unordered_map<std::string, at::Tensor>& full) {
  c10::NoGradGuard no_grad;
  for (const ParamSpec& s : plan_.specs()) {
    auto it = full.find(s.fqn);
    if (it == full.end()) throw_input("sharding engine: initial values lack parameter '", s.fqn, "'");
    if (it->second.sizes().vec() != s.shape)
      throw_input("sharding engine: parameter '", s.fqn, "' has shape ", it->second.sizes(), ", the model expects ",
                  at::IntArrayRef(s.shape));
  }
  for (bool trainable : {true, false}) {
    for (const OwnedRange& r : local_ranges(trainable)) {
      at::Tensor src = full.at(r.fqn).reshape({-1}).narrow(0, r.param_offset, r.numel);
      at::Tensor& dst = trainable ? units_[r.unit].master : units_[r.unit].frozen;
      dst.narrow(0, r.shard_offset, r.numel).copy_(src);
    }
  }
  invalidate_gathered();
}

void ShardedModel::init_shards(const InitFn& fn) {
  c10::NoGradGuard no_grad;
  for (bool trainable : {true, false}) {
    for (const OwnedRange& r : local_ranges(trainable)) {
      at::Tensor& dst = trainable ? units_[r.unit].master : units_[r.unit].frozen;
      fn(r.fqn, r.param_offset, dst.narrow(0, r.shard_offset, r.numel));
    }
  }
  invalidate_gathered();
}

void ShardedModel::load_pieces(const std::vector<TensorPiece>& pieces) {
  c10::NoGradGuard no_grad;
  std::unordered_map<std::string, std::vector<OwnedRange>> owned;
  for (const OwnedRange& r : plan_.owned_ranges(owned_slice_)) owned[r.fqn].push_back(r);
  for (const TensorPiece& p : pieces) {
    const ParamSpec& spec = find_spec(plan_, p.name);
    at::Tensor data = p.data.reshape({-1});
    if (p.offset < 0 || p.offset + data.numel() > spec.numel())
      throw_input("sharding engine: piece of '", p.name, "' [", p.offset, ", ", p.offset + data.numel(),
                  ") lies outside the parameter's ", spec.numel(), " elements");
    for (const OwnedRange& r : owned[p.name]) {
      Interval got = intersect(Interval{r.param_offset, r.param_offset + r.numel},
                               Interval{p.offset, p.offset + data.numel()});
      if (got.size() == 0) continue;
      at::Tensor& dst = r.trainable ? units_[r.unit].master : units_[r.unit].frozen;
      int64_t local = owned_begin(r.unit, r.trainable) + r.shard_offset + (got.begin - r.param_offset);
      dst.narrow(0, local, got.size()).copy_(data.narrow(0, got.begin - p.offset, got.size()));
    }
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    replicate(units_[u].master, static_cast<int>(u), true);
    replicate(units_[u].frozen, static_cast<int>(u), false);
  }
  invalidate_gathered();
}

std::vector<TensorPiece> ShardedModel::trainable_pieces() {
  std::vector<TensorPiece> out;
  for (const OwnedRange& r : plan_.owned_ranges(owned_slice_, true))
    out.push_back(TensorPiece{r.fqn, r.param_offset,
                              units_[r.unit].master.narrow(0, owned_begin(r.unit, true) + r.shard_offset, r.numel)});
  return out;
}

std::vector<TensorPiece> ShardedModel::frozen_pieces() const {
  std::vector<TensorPiece> out;
  for (const OwnedRange& r : plan_.owned_ranges(owned_slice_, false))
    out.push_back(TensorPiece{
        r.fqn, r.param_offset,
        units_[r.unit].frozen.narrow(0, owned_begin(r.unit, false) + r.shard_offset, r.numel).to(at::kFloat)});
  return out;
}

void ShardedModel::sync_replicas() {
  for (size_t u = 0; u < units_.size(); ++u) replicate(units_[u].master, static_cast<int>(u), true);
  invalidate_gathered();
}

// Where ranks hold the same elements (no_shard: every rank; hybrid: the replicas), each one's owned
// slice overwrites the others' copies of it. Nothing to do where a rank's elements are its own.
void ShardedModel::replicate(at::Tensor& local, int unit, bool trainable) {
  const UnitPlan& p = plan_.unit(unit);
  const int64_t shard = trainable ? p.trainable.shard_numel : p.frozen.shard_numel;
  if (shard == 0 || !replica_comm_) return;
  at::Tensor mine = local.narrow(0, owned_begin(unit, trainable), shard).clone();
  replica_comm_->all_gather(mine, local);
}

void ShardedModel::gather_full(std::unordered_map<std::string, at::Tensor>& out, int unit, const FlatLayout& l,
                               const at::Tensor& local) {
  if (l.empty()) return;
  at::Tensor flat = local;
  if (!replicated()) {
    const at::Tensor send = local.device() == device_ ? local : upload(local);  // offloaded: via the device
    flat = at::empty({l.padded_numel}, send.options());
    group_.all_gather(send, flat);
  }
  for (const ParamSlot& p : l.params)
    out[p.fqn] = flat.narrow(0, p.offset, p.numel).to(at::kFloat).clone().reshape(p.shape);
}

std::unordered_map<std::string, at::Tensor> ShardedModel::full_params(bool include_frozen) {
  c10::NoGradGuard no_grad;
  std::unordered_map<std::string, at::Tensor> out;
  for (size_t u = 0; u < units_.size(); ++u) {
    gather_full(out, static_cast<int>(u), units_[u].plan->trainable, units_[u].master);
    if (include_frozen) gather_full(out, static_cast<int>(u), units_[u].plan->frozen, units_[u].frozen);
  }
  return out;
}

std::unordered_map<std::string, at::Tensor> ShardedModel::full_grads() {
  c10::NoGradGuard no_grad;
  finish_reductions();
  std::unordered_map<std::string, at::Tensor> out;
  for (size_t u = 0; u < units_.size(); ++u)
    gather_full(out, static_cast<int>(u), units_[u].plan->trainable, units_[u].grad);
  return out;
}

// ---------------------------------------------------------------------------------------------
// gradients

void ShardedModel::reduce_grad(int unit, const at::Tensor& full_grad) {
  c10::NoGradGuard no_grad;
  if (replicas_reduced_)
    throw_runtime("sharding engine: a backward pass after reduce_gradients() under ",
                  choice_name(kShardStrategyNames, strategy_),
                  ": the step's gradients were already all-reduced across the replicas (call zero_grad() first)");
  Unit& u = units_[unit];
  if (cfg_.no_sync) {
    if (!u.local_grad.defined()) u.local_grad = at::zeros({u.plan->trainable.padded_numel}, u.grad.options());
    u.local_grad.add_(full_grad.reshape({-1}));
    return;
  }
  reduce_into_shard(unit, full_grad);
}

// Sums the gradient of the whole flat buffer over the group's ranks (every rank unless hybrid; in
// reduce_dtype) into this rank's shard gradient: reduce-scatter when sharded, reduce-scatter +
// all-gather under no_shard, a local add for a group of one. With async_reduce the reduce-scatter
// is posted and the backward goes on; results are added to the shard gradient in the order they
// were posted (the same sums as blocking).
void ShardedModel::reduce_into_shard(int unit, const at::Tensor& full_grad) {
  Unit& u = units_[unit];
  ++counters_.reduce_scatters;
  if (group_.size() == 1) {
    // Nothing to sum over: one pass adds the gradient into the shard (rounded to reduce_dtype first
    // only where that is narrower than the gradient; widening to fp32 is exact either way), brought
    // down to the host first where the shard gradient lives there (offload "full").
    at::Tensor flat = full_grad.reshape({-1});
    if (reduce_dtype_ != at::kFloat && flat.scalar_type() != reduce_dtype_) flat = flat.to(reduce_dtype_);
    u.grad.add_(u.grad.device() == flat.device() ? flat : to_host(flat.contiguous()));
    return;
  }
  at::Tensor g = full_grad.reshape({-1}).to(reduce_dtype_).contiguous();
  // Both modes post the same non-blocking collective (an MPI library may sum in another order in
  // its blocking algorithm); without async_reduce the result is waited for at once.
  PendingReduce r;
  r.unit = unit;
  r.out = at::empty({u.plan->trainable.group_shard_numel}, g.options());
  r.work = group_.reduce_scatter_async(g, r.out, ReduceOp::Sum);
  if (!cfg_.async_reduce) {
    finish_reduce(r);
    return;
  }
  reductions_.push_back(std::move(r));
  while (reductions_.size() > kMaxPendingReduces) {
    finish_reduce(reductions_.front());
    reductions_.erase(reductions_.begin());
  }
}

void ShardedModel::finish_reduce(PendingReduce& r) {
  PhaseScope wait(phases_, Phase::ReduceScatterWait);
  if (r.work) r.work->wait();
  r.work.reset();
  Unit& u = units_[r.unit];
  if (strategy_ == ShardStrategy::NoShard) {
    // Reduce-scatter then all-gather rather than all-reduce: every rank receives the same bits (an
    // all-reduce may sum in a different order on each rank), so the replicas never drift apart.
    at::Tensor full = at::empty({u.plan->trainable.padded_numel}, r.out.options());
    comm_.all_gather(r.out, full);
    u.grad.add_(full);
  } else {
    u.grad.add_(u.grad.device() == r.out.device() ? r.out : to_host(r.out));  // offload "full": into the host
  }
}

void ShardedModel::finish_reductions() {
  c10::NoGradGuard no_grad;
  for (PendingReduce& r : reductions_) finish_reduce(r);
  reductions_.clear();
}

void ShardedModel::reduce_gradients() {
  c10::NoGradGuard no_grad;
  finish_reductions();
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    if (!u.local_grad.defined()) continue;
    reduce_into_shard(static_cast<int>(i), u.local_grad);
    u.local_grad = at::Tensor();
  }
  finish_reductions();
  if (hybrid_ && replica_comm_ && !replicas_reduced_) reduce_replicas();
  replicas_reduced_ = hybrid_;
}

// Hybrid: each group shard gradient summed across the replicas (in reduce_dtype), unit by unit, so
// that every replica gets the same bits: over more than two replicas as a reduce-scatter to the
// owned slice and an all-gather back (an all-reduce may sum in another order on each rank); over
// two as one all-reduce, whose every element is one addition, the same bits on both sides in any
// algorithm — and every algorithm sends each rank's buffer once, where MPI's reduce-scatter of two
// ranks may be a reduce to one of them (twice the bytes from the other; docs/sharding.md).
// Offload "full" keeps the gradients on the host: they go through the device for the collectives.
void ShardedModel::reduce_replicas() {
  PhaseScope wait(phases_, Phase::ReduceScatterWait);
  for (Unit& u : units_) {
    const FlatLayout& t = u.plan->trainable;
    if (t.empty()) continue;
    at::Tensor g = (u.grad.device() == device_ ? u.grad : upload(u.grad)).to(reduce_dtype_).contiguous();
    if (replica_comm_->size() == 2) {
      replica_comm_->all_reduce(g, ReduceOp::Sum);
    } else {
      at::Tensor mine = at::empty({t.shard_numel}, g.options());
      replica_comm_->reduce_scatter(g, mine, ReduceOp::Sum);
      replica_comm_->all_gather(mine, g);
    }
    if (!g.is_same(u.grad)) u.grad.copy_(g);
  }
}

void ShardedModel::zero_grad() {
  c10::NoGradGuard no_grad;
  replicas_reduced_ = false;
  for (PendingReduce& r : reductions_) r.work->wait();  // a discarded backward's reductions
  reductions_.clear();
  for (Unit& u : units_) {
    u.grad.zero_();
    u.local_grad = at::Tensor();
    u.kept = Gathered{};
  }
  drop_prefetches();
  awaiting_.clear();
}

// ---------------------------------------------------------------------------------------------
// memory

MemoryStats ShardedModel::memory_stats() const {
  MemoryStats m;
  for (const Unit& u : units_) {
    m.master_bytes += u.master.numel() * 4;
    m.grad_bytes += u.grad.numel() * 4;
    m.frozen_bytes += u.frozen.numel() * element_size(param_dtype_);
    if (u.local_grad.defined()) m.local_grad_bytes += u.local_grad.numel() * 4;
    if (u.cast.defined()) m.cast_bytes += u.cast.numel() * element_size(param_dtype_);
  }
  m.offload = offload_;
  if (staging_)
    for (int i = 0; i < 2; ++i)
      for (const at::Tensor* t : {&staging_->grad[i], &staging_->cast[i]})
        if (t->defined()) m.staging_bytes += t->numel() * element_size(t->scalar_type());
  GatherCounts c = memory_->counts();
  m.gather_cache_bytes = c.cached_bytes;
  m.gathered_bytes = c.live_bytes;
  m.peak_gathered_bytes = c.peak_bytes;
  m.gathered_units = c.live_units;
  m.peak_gathered_units = c.peak_units;
  return m;
}

void ShardedModel::reset_peak_memory() { memory_->reset_peak(); }

ShardedModel::Counters ShardedModel::counters() const {
  Counters c = counters_;
  GatherCounts g = memory_->counts();
  c.buffer_allocations = g.allocations;
  c.buffer_reuses = g.reuses;
  return c;
}

}  // namespace wmtp
