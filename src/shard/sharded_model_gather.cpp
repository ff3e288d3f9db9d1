// ShardedModel, gathering: begin_unit / end_unit, freeing after forward, re-gathering before
// backward, prefetching ahead of need, and keeping a unit gathered when its backward comes next.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>

#include "core/error.h"
#include "core/phase_timer.h"
#include "shard/gather_memory.h"
#include "shard/sharded_model.h"
#include "shard/sharded_model_internal.h"


namespace wmtp {

namespace {

// True while the autograd engine runs a backward pass on this thread (a hook, a backward function,
// or a recomputation under activation checkpointing).
bool in_backward_pass() { return torch::autograd::get_current_graph_task_exec_info() != nullptr; }

}  // namespace

void ShardedModel::UnitSequence::note(int unit) {
  if (pos < order.size() && order[pos] == unit) {
    ++pos;
  } else if (!order.empty() && order[0] == unit) {
    pos = 1;  // a new pass over the model
  } else {
    order.resize(pos);
    order.push_back(unit);
    pos = order.size();
  }
}

int ShardedModel::prefetch_depth() const { return replicated() ? 0 : cfg_.effective_prefetch_depth(); }

void ShardedModel::set_reshard_after_forward(const std::string& unit, bool reshard) {
  units_[static_cast<size_t>(index_of(unit))].reshard = reshard;
}

c10::Storage ShardedModel::new_buffer(int unit, bool trainable) {
  const FlatLayout& l = trainable ? units_[unit].plan->trainable : units_[unit].plan->frozen;
  return memory_->new_storage(unit, l.padded_numel * element_size(param_dtype_), device_);
}

// What a gather sends: the fp32 master, its param_dtype copy (made once per optimizer step, not
// once per gather), or the frozen shard (stored in param_dtype). Under offload "full" these are host
// tensors: start_fill uploads them.
at::Tensor ShardedModel::gather_source(int unit, bool trainable) {
  Unit& u = units_[unit];
  if (!trainable) return u.frozen;
  if (offload_ != Offload::None) return offloaded_cast(unit);
  if (param_dtype_ == at::kFloat) return u.master;
  if (!u.cast.defined()) {
    c10::NoGradGuard no_grad;
    u.cast = u.master.to(param_dtype_);
    ++counters_.param_casts;
  }
  return u.cast;
}

// Writes the unit's gathered flat buffer into `target`. Only through a fresh tensor over the storage
// or the communicator's raw pointer: never through a tensor that shares the version counter of views
// autograd saved, so refilling a released buffer does not invalidate them.
ShardedModel::Fill ShardedModel::start_fill(int unit, bool trainable, const c10::Storage& target, bool async) {
  c10::NoGradGuard no_grad;
  const FlatLayout& l = trainable ? units_[unit].plan->trainable : units_[unit].plan->frozen;
  Fill f;
  f.trainable = trainable;
  f.storage = target;
  at::Tensor out = tensor_over(target, l.padded_numel, param_dtype_);
  const at::Tensor src = gather_source(unit, trainable);
  if (replicated()) {
    out.copy_(src, /*non_blocking=*/true);  // offload "full": straight from pinned host memory
    return f;
  }
  f.send = src.device() == device_ ? src : upload(src);  // offload "full": the shard goes up first
  if (async) f.work = group_.all_gather_async(f.send, out);
  else
    group_.all_gather(f.send, out);
  return f;
}

// A blocking gather into fresh buffers; when replicated (no_shard, one rank, groups of one) the local buffer
// (or its param_dtype copy) itself: no copy, no collective.
ShardedModel::Gathered ShardedModel::acquire(int unit) {
  Unit& u = units_[unit];
  Gathered g;
  for (bool trainable : {true, false}) {
    if ((trainable ? u.plan->trainable : u.plan->frozen).empty()) continue;
    c10::Storage& s = trainable ? g.trainable : g.frozen;
    // Replicated: the local buffer (or its param_dtype copy) itself, replaced, never written, after
    // a step. Not under offload "full", whose shards live on the host: they go up into a buffer.
    if (replicated() && offload_ != Offload::Full) {
      s = gather_source(unit, trainable).storage();
      continue;
    }
    PhaseScope wait(phases_, Phase::AllgatherWait);
    s = new_buffer(unit, trainable);
    start_fill(unit, trainable, s, /*async=*/false);
  }
  if (!replicated()) ++counters_.gathers;
  return g;
}

// The prefetched buffers of a predicted begin_unit of this kind (forward or recompute), if the
// prediction was right; predicted units of the same kind that were skipped are dropped.
bool ShardedModel::take_prefetched(int unit, bool backward, Gathered& g) {
  for (size_t i = 0; i < pending_.size();) {
    Prefetch& p = pending_[i];
    if (p.awaiting_id >= 0 || p.backward != backward) {
      ++i;
      continue;
    }
    {
      PhaseScope wait(phases_, Phase::AllgatherWait);
      p.wait();
    }
    const bool hit = p.unit == unit;
    if (hit)
      for (Fill& f : p.fills) (f.trainable ? g.trainable : g.frozen) = f.storage;
    else
      ++counters_.dropped_prefetches;
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));  // a miss frees its buffers
    if (hit) return true;
  }
  return false;
}

// Starts gathering the units the recorded order says come next, up to the prefetch depth.
void ShardedModel::prefetch_begins(int unit, bool backward) {
  const int depth = prefetch_depth();
  const UnitSequence& seq = backward ? bwd_seq_ : fwd_seq_;
  for (size_t j = seq.pos; j < seq.order.size() && static_cast<int>(pending_.size()) < depth; ++j) {
    const int next = seq.order[j];
    if (next == unit) break;  // the order comes round to this unit again: stop predicting
    const Unit& n = units_[static_cast<size_t>(next)];
    const bool pending = std::any_of(pending_.begin(), pending_.end(), [&](const Prefetch& p) {
      return p.unit == next && p.awaiting_id < 0 && p.backward == backward;
    });
    if (pending || n.kept.any() || !n.active.empty()) continue;
    Prefetch p;
    p.unit = next;
    p.backward = backward;
    for (bool trainable : {true, false})
      if (!(trainable ? n.plan->trainable : n.plan->frozen).empty())
        p.fills.push_back(start_fill(next, trainable, new_buffer(next, trainable), /*async=*/true));
    if (p.fills.empty()) continue;
    pending_.push_back(std::move(p));
    ++counters_.gathers;
    ++counters_.prefetched;
  }
}

// Before another unit begins, kept buffers of other units are freed after all (their backward did
// not come next this time): the bound of units gathered at once holds. Pinned units stay.
void ShardedModel::release_kept(int except) {
  for (Awaiting& a : awaiting_) {
    if (!a.kept || a.unit == except || !units_[static_cast<size_t>(a.unit)].reshard) continue;
    for (auto& [trainable, weak] : a.storages)
      if (auto impl = weak.lock()) {
        c10::Storage s(impl);
        if (s.nbytes() != 0) release_storage(s);
      }
    a.kept = false;
  }
  for (size_t i = 0; i < units_.size(); ++i)
    if (static_cast<int>(i) != except && units_[i].reshard && units_[i].kept.any()) units_[i].kept = Gathered{};
}

UnitParams ShardedModel::begin_unit(const std::string& name) {
  const int unit = index_of(name);
  Unit& u = units_[unit];
  const bool backward = in_backward_pass();
  if (!replicated()) {
    release_kept(unit);
    // A recompute that follows its own no-grad forward with nothing begun in between: keep next time.
    if (backward && u.last_end_event >= 0 && cfg_.keep_immediate) u.immediate = u.last_end_event == begin_events_;
    u.last_end_event = -1;
  }
  ++begin_events_;
  (backward ? bwd_seq_ : fwd_seq_).note(unit);

  Gathered g;
  if (u.kept.any()) {
    g = u.kept;
    u.kept = Gathered{};
  } else if (!take_prefetched(unit, backward, g)) {
    g = acquire(unit);
  }
  if (prefetch_depth() > 0) prefetch_begins(unit, backward);

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
  u.active.push_back(g);
  return params;
}

void ShardedModel::end_unit(const std::string& name, const at::Tensor& output) {
  const int unit = index_of(name);
  Unit& u = units_[unit];
  if (u.active.empty()) throw_runtime("sharding engine: end_unit('", name, "') without begin_unit");
  Gathered a = u.active.back();
  u.active.pop_back();
  if (replicated()) return;  // whole local buffers (or their param_dtype copies) stay

  const bool backward = in_backward_pass();
  const bool graph = c10::GradMode::is_enabled() && output.defined() && output.requires_grad();
  if (graph && (keeps_gathered(strategy_) || backward)) return;  // the graph keeps them
  const bool keep = !backward && (!u.reshard || (cfg_.keep_immediate && u.immediate));
  if (!backward) u.last_end_event = begin_events_;
  if (!graph) {
    // Nothing will back-propagate through these views. Kept only for a recompute that comes next.
    if (keep) {
      u.kept = a;
      ++counters_.kept;
    } else {
      for (const c10::Storage* s : {&a.trainable, &a.frozen})
        if (*s) release_storage(*s);
    }
    return;
  }
  // full_shard with a graph: autograd holds views of the buffers; free their memory (unless kept)
  // and give it back just before the unit's backward (a hook on the output fires before the
  // output's grad_fn runs).
  Awaiting entry;
  entry.id = next_awaiting_id_++;
  entry.unit = unit;
  entry.end_event = begin_events_;
  entry.kept = keep;
  for (bool trainable : {true, false}) {
    const c10::Storage& s = trainable ? a.trainable : a.frozen;
    if (!s) continue;
    if (!keep) release_storage(s);
    entry.storages.emplace_back(trainable, WeakStorage(s.getWeakStorageImpl()));
  }
  if (entry.storages.empty()) return;
  if (keep) ++counters_.kept;
  awaiting_.push_back(entry);
  entry.kept = false;  // the hook's copy only needs the storages
  output.register_hook([this, entry](const at::Tensor&) { regather(entry); });
}

// The hook of a unit instance that ended its forward with a graph: its backward is about to run.
void ShardedModel::regather(const Awaiting& a) {
  auto it = std::find_if(awaiting_.begin(), awaiting_.end(), [&](const Awaiting& x) { return x.id == a.id; });
  if (it != awaiting_.end()) awaiting_.erase(it);
  if (cfg_.keep_immediate) units_[static_cast<size_t>(a.unit)].immediate = a.end_event == begin_events_;
  if (last_regather_prediction_.first >= 0 && last_regather_prediction_.second != a.unit)
    bwd_no_prefetch_.insert(last_regather_prediction_);  // the backward did not continue there
  last_regather_prediction_ = {-1, -1};

  auto pending = std::find_if(pending_.begin(), pending_.end(),
                              [&](const Prefetch& p) { return p.awaiting_id == a.id; });
  if (pending != pending_.end()) {
    PhaseScope wait(phases_, Phase::AllgatherWait);
    pending->wait();
    pending_.erase(pending);
  } else {
    PhaseScope wait(phases_, Phase::AllgatherWait);
    bool refilled = false;
    for (auto& [trainable, weak] : a.storages) {
      c10::intrusive_ptr<c10::StorageImpl> impl = weak.lock();
      if (!impl) continue;  // nothing saved these parameters for backward
      c10::Storage s(impl);
      if (s.nbytes() != 0) continue;  // kept gathered
      const FlatLayout& l = trainable ? units_[a.unit].plan->trainable : units_[a.unit].plan->frozen;
      refill_storage(s, *memory_, a.unit, l.padded_numel * element_size(param_dtype_));
      start_fill(a.unit, trainable, s, /*async=*/false);
      refilled = true;
    }
    if (refilled) ++counters_.regathers;
  }
  if (prefetch_depth() > 0) prefetch_regathers(a.unit);
}

// Starts re-gathering the most recently freed unit instances that still await their backward, newest
// first: in a chain of units that is the order the backward reaches them. A pair (from, next) that
// once turned out not to be consecutive (the backward stopped, e.g. at the detached trunk output of
// sequential unembedding) is not prefetched again.
void ShardedModel::prefetch_regathers(int from) {
  const int depth = prefetch_depth();
  bool first = true;
  for (size_t i = awaiting_.size(); i-- > 0;) {
    Awaiting& next = awaiting_[i];
    std::vector<std::pair<bool, c10::Storage>> released;
    bool alive = false;
    for (auto& [trainable, weak] : next.storages)
      if (auto impl = weak.lock()) {
        alive = true;
        c10::Storage s(impl);
        if (s.nbytes() == 0) released.emplace_back(trainable, s);
      }
    if (!alive) {
      awaiting_.erase(awaiting_.begin() + static_cast<std::ptrdiff_t>(i));  // its graph is gone
      continue;
    }
    if (first) {
      if (bwd_no_prefetch_.count({from, next.unit})) return;
      last_regather_prediction_ = {from, next.unit};
      first = false;
    }
    if (released.empty()) continue;  // kept gathered: nothing to do
    const bool pending = std::any_of(pending_.begin(), pending_.end(),
                                     [&](const Prefetch& p) { return p.awaiting_id == next.id; });
    if (pending) continue;
    if (static_cast<int>(pending_.size()) >= depth) return;
    Prefetch p;
    p.unit = next.unit;
    p.backward = true;
    p.awaiting_id = next.id;
    for (auto& [trainable, s] : released) {
      const FlatLayout& l = trainable ? units_[next.unit].plan->trainable : units_[next.unit].plan->frozen;
      refill_storage(s, *memory_, next.unit, l.padded_numel * element_size(param_dtype_));
      p.fills.push_back(start_fill(next.unit, trainable, s, /*async=*/true));
    }
    pending_.push_back(std::move(p));
    ++counters_.regathers;
    ++counters_.prefetched;
  }
}

void ShardedModel::drop_prefetches() {
  for (Prefetch& p : pending_) {
    p.wait();
    if (p.awaiting_id >= 0)
      for (Fill& f : p.fills) release_storage(f.storage);  // its backward never came
    ++counters_.dropped_prefetches;
  }
  pending_.clear();
  last_regather_prediction_ = {-1, -1};
}

void ShardedModel::invalidate_gathered() {
  drop_prefetches();
  for (Unit& u : units_) {
    // Remade from the new masters at the next gather (offload: into the same buffer, or earlier by
    // masters_changed()).
    if (offload_ == Offload::None) u.cast = at::Tensor();
    u.cast_valid = false;
    u.kept = Gathered{};
  }
}

}  // namespace wmtp
