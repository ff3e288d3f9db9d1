// ShardedModel: gather / free / re-gather / reduce of unit parameters around the functional model.
#include "shard/sharded_model.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "dist/communicator.h"
#include "shard/gather_memory.h"

namespace wmtp {

namespace {

using WeakStorage = c10::weak_intrusive_ptr<c10::StorageImpl>;

// True while the autograd engine runs a backward pass on this thread (a hook, a backward function,
// or a recomputation under activation checkpointing).
bool in_backward_pass() { return torch::autograd::get_current_graph_task_exec_info() != nullptr; }

int64_t element_size(at::ScalarType t) { return static_cast<int64_t>(c10::elementSize(t)); }

std::vector<int64_t> split_sizes(const FlatLayout& l) {
  std::vector<int64_t> s;
  for (const ParamSlot& p : l.params) s.push_back(p.numel);
  if (l.padding() > 0) s.push_back(l.padding());
  return s;
}

}  // namespace

struct ShardedModel::Unit {
  const UnitPlan* plan = nullptr;
  at::Tensor master;      // fp32 trainable elements this rank holds (shard or replica)
  at::Tensor grad;        // fp32, same size
  at::Tensor frozen;      // param_dtype frozen elements this rank holds
  at::Tensor local_grad;  // no_sync: fp32 gradient of the whole flat buffer, accumulated
  std::vector<int64_t> t_split, f_split;
  struct Active {
    c10::Storage trainable, frozen;
  };
  std::vector<Active> active;  // begun, not yet ended
};

struct ShardedModel::Gathered {
  c10::Storage trainable, frozen;
};

// A gather into `storage` (which already has its memory); `work` is null once complete.
struct ShardedModel::InFlight {
  int unit = -1;
  bool trainable = true;
  c10::Storage storage;
  at::Tensor send;
  CommWorkPtr work;
  void wait() {
    if (work) work->wait();
    work.reset();
    send = at::Tensor();
  }
};

ShardedModel::ShardedModel(const std::vector<ParamSpec>& specs, Communicator& comm, const ShardingConfig& cfg,
                           c10::Device device)
    : plan_(specs, comm.size()),
      cfg_(cfg),
      strategy_(cfg.strategy_enum()),
      comm_(comm),
      rank_(comm.rank()),
      world_(comm.size()),
      device_(device),
      param_dtype_(cfg.param_scalar_type()),
      reduce_dtype_(cfg.reduce_scalar_type()) {
  const bool replicated = strategy_ == ShardStrategy::NoShard;
  memory_ = std::make_shared<GatherMemory>(static_cast<int>(plan_.units().size()));
  anchor_ = at::empty({0}, at::TensorOptions().dtype(at::kFloat).device(device_));
  anchor_.requires_grad_(true);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  units_.resize(plan_.units().size());
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    u.plan = &plan_.units()[i];
    index_[u.plan->name] = static_cast<int>(i);
    const FlatLayout& t = u.plan->trainable;
    const FlatLayout& f = u.plan->frozen;
    int64_t local_t = replicated ? t.padded_numel : t.shard_numel;
    int64_t local_f = replicated ? f.padded_numel : f.shard_numel;
    u.master = at::zeros({local_t}, f32);
    u.grad = at::zeros({local_t}, f32);
    u.frozen = at::zeros({local_f}, f32.dtype(param_dtype_));
    u.t_split = split_sizes(t);
    u.f_split = split_sizes(f);
    if (t.empty()) continue;
    TrainableShard s;
    s.unit = static_cast<int>(i);
    s.master = u.master;
    s.grad = u.grad;
    s.owned_begin = replicated ? rank_ * t.shard_numel : 0;
    s.owned_numel = t.shard_numel;
    for (const OwnedRange& r : local_ranges(true))
      if (r.unit == s.unit) s.segments.push_back(LocalSegment{r.fqn, r.shard_offset, r.param_offset, r.numel});
    shards_.push_back(std::move(s));
  }
}

ShardedModel::~ShardedModel() {
  try {
    drop_prefetches();
  } catch (...) {
    // A failed wait cannot be reported from a destructor; the next collective fails loudly.
  }
}

int ShardedModel::index_of(const std::string& unit) const {
  auto it = index_.find(unit);
  if (it == index_.end()) throw_runtime("sharding engine: unknown unit '", unit, "' (not in the model's parameter specs)");
  return it->second;
}

// What this rank stores: its owned ranges when sharded; every parameter whole when replicated.
std::vector<OwnedRange> ShardedModel::local_ranges(bool trainable) const {
  if (strategy_ != ShardStrategy::NoShard) return plan_.owned_ranges(rank_, trainable);
  std::vector<OwnedRange> out;
  for (size_t u = 0; u < plan_.units().size(); ++u) {
    const FlatLayout& l = trainable ? plan_.units()[u].trainable : plan_.units()[u].frozen;
    for (const ParamSlot& p : l.params)
      out.push_back(OwnedRange{p.fqn, static_cast<int>(u), trainable, 0, p.offset, p.numel});
  }
  return out;
}

int64_t ShardedModel::owned_begin(int unit, bool trainable) const {
  if (strategy_ != ShardStrategy::NoShard) return 0;
  const UnitPlan& p = plan_.unit(unit);
  return rank_ * (trainable ? p.trainable.shard_numel : p.frozen.shard_numel);
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
  for (const OwnedRange& r : plan_.owned_ranges(rank_)) owned[r.fqn].push_back(r);
  for (const TensorPiece& p : pieces) {
    const ParamSpec& spec = find_spec(plan_, p.name);
    at::Tensor data = p.data.reshape({-1});
    if (p.offset < 0 || p.offset + data.numel() > spec.numel())
      throw_input("sharding engine: piece of '", p.name, "' [", p.offset, ", ", p.offset + data.numel(),
                  ") lies outside the parameter's ", spec.numel(), " elements");
    for (const OwnedRange& r : owned[p.name]) {
      Interval got = intersect(Interval{r.param_offset, r.param_offset + r.numel}, Interval{p.offset, p.offset + data.numel()});
      if (got.size() == 0) continue;
      at::Tensor& dst = r.trainable ? units_[r.unit].master : units_[r.unit].frozen;
      int64_t local = owned_begin(r.unit, r.trainable) + r.shard_offset + (got.begin - r.param_offset);
      dst.narrow(0, local, got.size()).copy_(data.narrow(0, got.begin - p.offset, got.size()));
    }
  }
  if (strategy_ == ShardStrategy::NoShard) {
    for (size_t u = 0; u < units_.size(); ++u) {
      replicate(units_[u].master, static_cast<int>(u), true);
      replicate(units_[u].frozen, static_cast<int>(u), false);
    }
  }
  invalidate_gathered();
}

std::vector<TensorPiece> ShardedModel::trainable_pieces() {
  std::vector<TensorPiece> out;
  for (const OwnedRange& r : plan_.owned_ranges(rank_, true))
    out.push_back(TensorPiece{r.fqn, r.param_offset,
                             units_[r.unit].master.narrow(0, owned_begin(r.unit, true) + r.shard_offset, r.numel)});
  return out;
}

std::vector<TensorPiece> ShardedModel::frozen_pieces() const {
  std::vector<TensorPiece> out;
  for (const OwnedRange& r : plan_.owned_ranges(rank_, false))
    out.push_back(TensorPiece{
        r.fqn, r.param_offset,
        units_[r.unit].frozen.narrow(0, owned_begin(r.unit, false) + r.shard_offset, r.numel).to(at::kFloat)});
  return out;
}

void ShardedModel::sync_replicas() {
  if (strategy_ == ShardStrategy::NoShard)
    for (size_t u = 0; u < units_.size(); ++u) replicate(units_[u].master, static_cast<int>(u), true);
  invalidate_gathered();
}

// Under no_shard: every rank's owned slice of the replica overwrites the others' copies.
void ShardedModel::replicate(at::Tensor& full_local, int unit, bool trainable) {
  const UnitPlan& p = plan_.unit(unit);
  int64_t shard = trainable ? p.trainable.shard_numel : p.frozen.shard_numel;
  if (shard == 0 || world_ == 1) return;
  at::Tensor mine = full_local.narrow(0, rank_ * shard, shard).clone();
  comm_.all_gather(mine, full_local);
}

void ShardedModel::gather_full(std::unordered_map<std::string, at::Tensor>& out, int unit, const FlatLayout& l,
                               const at::Tensor& local) {
  if (l.empty()) return;
  at::Tensor flat = local;
  if (strategy_ != ShardStrategy::NoShard && world_ > 1) {
    flat = at::empty({l.padded_numel}, local.options());
    comm_.all_gather(local, flat);
  }
  for (const ParamSlot& p : l.params) out[p.fqn] = flat.narrow(0, p.offset, p.numel).to(at::kFloat).clone().reshape(p.shape);
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
  std::unordered_map<std::string, at::Tensor> out;
  for (size_t u = 0; u < units_.size(); ++u)
    gather_full(out, static_cast<int>(u), units_[u].plan->trainable, units_[u].grad);
  return out;
}

// ---------------------------------------------------------------------------------------------
// gathering

c10::Storage ShardedModel::new_buffer(int unit, bool trainable) {
  const FlatLayout& l = trainable ? units_[unit].plan->trainable : units_[unit].plan->frozen;
  return memory_->new_storage(unit, l.padded_numel * element_size(param_dtype_), device_);
}

// Writes the unit's gathered flat buffer into `target`. Only through a fresh tensor over the storage
// or MPI's raw pointer: never through a tensor that shares the version counter of views autograd
// saved, so refilling a released buffer does not invalidate them.
std::unique_ptr<ShardedModel::InFlight> ShardedModel::start_fill(int unit, bool trainable, const c10::Storage& target,
                                                                 bool async) {
  c10::NoGradGuard no_grad;
  Unit& u = units_[unit];
  const FlatLayout& l = trainable ? u.plan->trainable : u.plan->frozen;
  auto f = std::make_unique<InFlight>();
  f->unit = unit;
  f->trainable = trainable;
  f->storage = target;
  at::Tensor out = tensor_over(target, l.padded_numel, param_dtype_);
  const at::Tensor& src = trainable ? u.master : u.frozen;
  if (strategy_ == ShardStrategy::NoShard || world_ == 1) {
    out.copy_(src);
    return f;
  }
  f->send = src.scalar_type() == param_dtype_ ? src : src.to(param_dtype_);
  if (async)
    f->work = comm_.all_gather_async(f->send, out);
  else
    comm_.all_gather(f->send, out);
  return f;
}

ShardedModel::Gathered ShardedModel::acquire(int unit) {
  Unit& u = units_[unit];
  Gathered g;
  if (fwd_pending_unit_ == unit) {
    for (auto& f : fwd_pending_) {
      f->wait();
      (f->trainable ? g.trainable : g.frozen) = f->storage;
    }
    fwd_pending_.clear();
    fwd_pending_unit_ = -1;
    return g;
  }
  if (!u.plan->trainable.empty()) {
    if (strategy_ == ShardStrategy::NoShard && param_dtype_ == at::kFloat) {
      g.trainable = u.master.storage();  // the replica itself: nothing to gather
    } else {
      g.trainable = new_buffer(unit, true);
      start_fill(unit, true, g.trainable, false);
    }
  }
  if (!u.plan->frozen.empty()) {
    if (strategy_ == ShardStrategy::NoShard) {
      g.frozen = u.frozen.storage();
    } else {
      g.frozen = new_buffer(unit, false);
      start_fill(unit, false, g.frozen, false);
    }
  }
  return g;
}

UnitParams ShardedModel::begin_unit(const std::string& name) {
  const int unit = index_of(name);
  Unit& u = units_[unit];
  const bool backward = in_backward_pass();
  if (!backward) {
    if (fwd_pending_unit_ >= 0 && fwd_pending_unit_ != unit) drop_forward_prefetch();  // mispredicted
    note_forward_begin(unit);
  }
  Gathered g = acquire(unit);
  if (!backward && cfg_.prefetch && strategy_ != ShardStrategy::NoShard) {
    int next = fwd_pos_ < fwd_sequence_.size() ? fwd_sequence_[fwd_pos_] : -1;
    if (next >= 0 && next != unit) start_forward_prefetch(next);
  }

  UnitParams params;
  if (!u.plan->trainable.empty()) {
    at::Tensor full = tensor_over(g.trainable, u.plan->trainable.padded_numel, param_dtype_);
    if (c10::GradMode::is_enabled()) full = attach_gather(anchor_, full, this, unit);
    std::vector<at::Tensor> parts = full.split_with_sizes(u.t_split);
    for (size_t i = 0; i < u.plan->trainable.params.size(); ++i)
      params[u.plan->trainable.params[i].fqn] = parts[i].view(u.plan->trainable.params[i].shape);
  }
  if (!u.plan->frozen.empty()) {
    at::Tensor full = tensor_over(g.frozen, u.plan->frozen.padded_numel, param_dtype_);
    std::vector<at::Tensor> parts = full.split_with_sizes(u.f_split);
    for (size_t i = 0; i < u.plan->frozen.params.size(); ++i)
      params[u.plan->frozen.params[i].fqn] = parts[i].view(u.plan->frozen.params[i].shape);
  }
  u.active.push_back(Unit::Active{g.trainable, g.frozen});
  return params;
}

void ShardedModel::end_unit(const std::string& name, const at::Tensor& output) {
  const int unit = index_of(name);
  Unit& u = units_[unit];
  if (u.active.empty()) throw_runtime("sharding engine: end_unit('", name, "') without begin_unit");
  Unit::Active a = u.active.back();
  u.active.pop_back();
  if (strategy_ == ShardStrategy::NoShard) return;  // replicas stay; bf16 casts live as long as the graph

  const bool graph = c10::GradMode::is_enabled() && output.defined() && output.requires_grad();
  if (graph && (strategy_ == ShardStrategy::ShardGradOp || in_backward_pass())) return;  // the graph keeps them
  std::vector<std::pair<bool, WeakStorage>> weak;
  for (bool trainable : {true, false}) {
    const c10::Storage& s = trainable ? a.trainable : a.frozen;
    if (!s) continue;
    release_storage(s);
    if (graph) weak.emplace_back(trainable, WeakStorage(s.getWeakStorageImpl()));
  }
  if (!graph || weak.empty()) return;
  // full_shard with a graph: autograd holds views of the released storage; give it memory back just
  // before the unit's backward (a hook on the output fires before the output's grad_fn runs).
  Awaiting entry{next_awaiting_id_++, unit, std::move(weak)};
  awaiting_.push_back(entry);
  output.register_hook([this, entry](const at::Tensor&) { regather(entry); });
}

void ShardedModel::note_forward_begin(int unit) {
  if (fwd_pos_ < fwd_sequence_.size() && fwd_sequence_[fwd_pos_] == unit) {
    ++fwd_pos_;
  } else if (!fwd_sequence_.empty() && fwd_sequence_[0] == unit) {
    fwd_pos_ = 1;  // a new pass over the model
  } else {
    fwd_sequence_.resize(fwd_pos_);
    fwd_sequence_.push_back(unit);
    fwd_pos_ = fwd_sequence_.size();
  }
}

bool ShardedModel::prefetch_outstanding() const { return fwd_pending_unit_ >= 0 || !bwd_pending_.empty(); }

void ShardedModel::start_forward_prefetch(int unit) {
  if (prefetch_outstanding()) return;  // at most one unit gathered ahead
  const Unit& u = units_[unit];
  for (bool trainable : {true, false}) {
    if ((trainable ? u.plan->trainable : u.plan->frozen).empty()) continue;
    fwd_pending_.push_back(start_fill(unit, trainable, new_buffer(unit, trainable), /*async=*/true));
  }
  fwd_pending_unit_ = fwd_pending_.empty() ? -1 : unit;
}

void ShardedModel::drop_forward_prefetch() {
  for (auto& f : fwd_pending_) f->wait();
  fwd_pending_.clear();  // the storages die with the InFlights
  fwd_pending_unit_ = -1;
}

// The hook of a released unit instance: its backward is about to run.
void ShardedModel::regather(const Awaiting& a) {
  auto it = std::find_if(awaiting_.begin(), awaiting_.end(), [&](const Awaiting& x) { return x.id == a.id; });
  if (it != awaiting_.end()) awaiting_.erase(it);
  if (bwd_prefetch_from_ >= 0 && bwd_prefetch_to_ != a.unit)
    bwd_no_prefetch_.insert({bwd_prefetch_from_, bwd_prefetch_to_});  // that prefetch waited for nothing
  bwd_prefetch_from_ = bwd_prefetch_to_ = -1;

  for (auto& [trainable, weak] : a.storages) {
    c10::intrusive_ptr<c10::StorageImpl> impl = weak.lock();
    if (!impl) continue;  // nothing saved these parameters for backward
    auto pending = std::find_if(bwd_pending_.begin(), bwd_pending_.end(), [&](const std::unique_ptr<InFlight>& f) {
      return f->storage.unsafeGetStorageImpl() == impl.get();
    });
    if (pending != bwd_pending_.end()) {
      (*pending)->wait();
      bwd_pending_.erase(pending);
      continue;
    }
    c10::Storage s(impl);
    if (s.nbytes() != 0) continue;
    const FlatLayout& l = trainable ? units_[a.unit].plan->trainable : units_[a.unit].plan->frozen;
    refill_storage(s, *memory_, a.unit, l.padded_numel * element_size(param_dtype_));
    start_fill(a.unit, trainable, s, false);
  }
  if (cfg_.prefetch) prefetch_next_backward(a.unit);
}

// Starts re-gathering the most recently freed unit that still awaits its backward: in a chain of
// units that is the next one the backward reaches. A pair (from, to) that once turned out not to be
// consecutive (the chain was cut, e.g. by a detach) is not prefetched again.
void ShardedModel::prefetch_next_backward(int from) {
  while (!awaiting_.empty()) {
    Awaiting& next = awaiting_.back();
    std::vector<std::pair<bool, c10::intrusive_ptr<c10::StorageImpl>>> alive;
    for (auto& [trainable, weak] : next.storages)
      if (auto impl = weak.lock()) alive.emplace_back(trainable, impl);
    if (alive.empty()) {
      awaiting_.pop_back();  // its graph is gone
      continue;
    }
    if (prefetch_outstanding() || bwd_no_prefetch_.count({from, next.unit})) return;
    for (auto& [trainable, impl] : alive) {
      c10::Storage s(impl);
      if (s.nbytes() != 0) continue;
      const FlatLayout& l = trainable ? units_[next.unit].plan->trainable : units_[next.unit].plan->frozen;
      refill_storage(s, *memory_, next.unit, l.padded_numel * element_size(param_dtype_));
      bwd_pending_.push_back(start_fill(next.unit, trainable, s, /*async=*/true));
    }
    if (!bwd_pending_.empty()) {
      bwd_prefetch_from_ = from;
      bwd_prefetch_to_ = next.unit;
    }
    return;
  }
}

void ShardedModel::drop_prefetches() {
  drop_forward_prefetch();
  for (auto& f : bwd_pending_) {
    f->wait();
    release_storage(f->storage);  // its backward never came
  }
  bwd_pending_.clear();
  bwd_prefetch_from_ = bwd_prefetch_to_ = -1;
}

void ShardedModel::invalidate_gathered() { drop_prefetches(); }

// ---------------------------------------------------------------------------------------------
// gradients

void ShardedModel::reduce_grad(int unit, const at::Tensor& full_grad) {
  c10::NoGradGuard no_grad;
  Unit& u = units_[unit];
  if (cfg_.no_sync) {
    if (!u.local_grad.defined()) u.local_grad = at::zeros({u.plan->trainable.padded_numel}, u.grad.options());
    u.local_grad.add_(full_grad.reshape({-1}));
    return;
  }
  reduce_into_shard(unit, full_grad);
}

// Sums the gradient of the whole flat buffer over ranks (in reduce_dtype) into this rank's shard
// gradient: reduce-scatter when sharded, all-reduce when replicated, a local add for one rank.
void ShardedModel::reduce_into_shard(int unit, const at::Tensor& full_grad) {
  Unit& u = units_[unit];
  at::Tensor g = full_grad.reshape({-1}).to(reduce_dtype_).contiguous();
  if (world_ == 1) {
    u.grad.add_(g);
  } else if (strategy_ == ShardStrategy::NoShard) {
    // Reduce-scatter then all-gather rather than all-reduce: every rank receives the same bits (an
    // all-reduce may sum in a different order on each rank), so the replicas never drift apart.
    at::Tensor part = at::empty({u.plan->trainable.shard_numel}, g.options());
    comm_.reduce_scatter(g, part, ReduceOp::Sum);
    at::Tensor full = at::empty_like(g);
    comm_.all_gather(part, full);
    u.grad.add_(full);
  } else {
    at::Tensor out = at::empty({u.plan->trainable.shard_numel}, g.options());
    comm_.reduce_scatter(g, out, ReduceOp::Sum);
    u.grad.add_(out);
  }
}

void ShardedModel::reduce_gradients() {
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < units_.size(); ++i) {
    Unit& u = units_[i];
    if (!u.local_grad.defined()) continue;
    reduce_into_shard(static_cast<int>(i), u.local_grad);
    u.local_grad = at::Tensor();
  }
}

void ShardedModel::zero_grad() {
  c10::NoGradGuard no_grad;
  for (Unit& u : units_) {
    u.grad.zero_();
    u.local_grad = at::Tensor();
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
  }
  GatherCounts c = memory_->counts();
  m.gathered_bytes = c.live_bytes;
  m.peak_gathered_bytes = c.peak_bytes;
  m.gathered_units = c.live_units;
  m.peak_gathered_units = c.peak_units;
  return m;
}

void ShardedModel::reset_peak_memory() { memory_->reset_peak(); }

}  // namespace wmtp
