// ShardedModel, offload ([sharding] offload): host placement of the masters (and, "full", of the
// gradients and parameter shards), the param_dtype copies the gathers send, and the copies of the
// optimizer step between device and host through pinned staging slots.
//
// Offload "optimizer": gradients are reduced on the device as without offload; the optimizer asks
// for each shard's gradient (optimizer_grad: the next shard's download is queued before this one is
// waited for), updates the host masters, and masters_changed() writes the new param_dtype copy into
// a staging slot and queues its upload into the device copy the gathers send — so the CPU's update of
// shard i overlaps the download of shard i + 1 and the upload of shard i - 1, and the next step's
// gathers find the copies on the device. Offload "full": the host keeps the param_dtype copy; each
// gather uploads the unit's shard just before its all-gather (start_fill), and each reduction's result
// is added into the host gradient.
//
// On the CPU the "device" is the host: the same buffers exist separately and every copy runs (as a
// plain copy), so the CPU tests exercise these paths.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "shard/sharded_model.h"
#include "shard/sharded_model_internal.h"

namespace wmtp {

at::Tensor ShardedModel::upload(const at::Tensor& host) const {
  at::Tensor d = at::empty(host.sizes(), host.options().device(device_));
  d.copy_(host, /*non_blocking=*/true);  // pinned source: ordered on the current stream
  return d;
}

at::Tensor ShardedModel::to_host(const at::Tensor& t) const {
  at::Tensor h = at::empty(t.sizes(), t.options().device(at::kCPU));
  h.copy_(t);  // waits: the caller adds it into host state at once
  return h;
}

// The param_dtype copy of `unit`'s masters under offload: filled from the host masters when stale.
at::Tensor ShardedModel::offloaded_cast(int unit) {
  Unit& u = units_[static_cast<size_t>(unit)];
  if (offload_ == Offload::Full && param_dtype_ == at::kFloat) return u.master;  // already what is sent
  if (!u.cast_valid) fill_cast(unit, /*slot=*/0, /*wait=*/true);
  return u.cast;
}

// Offload "optimizer": through staging slot `slot` into the device copy (the optimizer uses slot
// i % 2 for shard i, so a refill waits only for the upload two shards back). "full": into a pinned
// host copy.
void ShardedModel::fill_cast(int unit, size_t slot, bool wait) {
  c10::NoGradGuard no_grad;
  Unit& u = units_[static_cast<size_t>(unit)];
  const int64_t n = u.master.numel();
  if (offload_ == Offload::Full) {
    if (!u.cast.defined()) u.cast = pinned_host_empty(n, param_dtype_, device_);
    u.cast.copy_(u.master);
  } else {
    if (!staging_) staging_ = std::make_unique<Staging>();
    Staging& st = *staging_;
    const int64_t cap = std::max<int64_t>(n, st.cast[slot].defined() ? st.cast[slot].numel() : 0);
    if (!st.cast[slot].defined() || st.cast[slot].numel() < n) {
      st.cast_sent[slot].wait();
      st.cast[slot] = pinned_host_empty(cap, param_dtype_, device_);
    }
    st.cast_sent[slot].wait();  // the slot's previous upload has left
    at::Tensor slot_view = st.cast[slot].narrow(0, 0, n);
    slot_view.copy_(u.master);  // the conversion .to(param_dtype) does, on the host
    if (!u.cast.defined()) u.cast = at::empty({n}, at::TensorOptions().dtype(param_dtype_).device(device_));
    u.cast.copy_(slot_view, /*non_blocking=*/true);
    st.cast_sent[slot] = StreamFence::record(device_);
    if (wait) st.cast_sent[slot].wait();
  }
  u.cast_valid = true;
  ++counters_.param_casts;
}

void ShardedModel::start_grad_download(size_t i) {
  Staging& st = *staging_;
  const size_t slot = i % 2;
  if (st.grad_of[slot] == static_cast<int64_t>(i)) return;
  const at::Tensor& g = shards_[i].grad;
  if (!st.grad[slot].defined() || st.grad[slot].numel() < g.numel()) {
    int64_t largest = 0;
    for (const TrainableShard& s : shards_) largest = std::max<int64_t>(largest, s.grad.numel());
    st.grad_ready[slot].wait();
    st.grad[slot] = pinned_host_empty(largest, at::kFloat, device_);
  }
  st.grad[slot].narrow(0, 0, g.numel()).copy_(g, /*non_blocking=*/true);
  st.grad_ready[slot] = StreamFence::record(device_);
  st.grad_of[slot] = static_cast<int64_t>(i);
}

at::Tensor ShardedModel::optimizer_grad(size_t i) {
  if (offload_ != Offload::Optimizer) return shards_[i].grad;
  c10::NoGradGuard no_grad;
  if (!staging_) staging_ = std::make_unique<Staging>();
  start_grad_download(i);
  if (i + 1 < shards_.size()) start_grad_download(i + 1);  // overlaps this shard's update
  Staging& st = *staging_;
  st.grad_ready[i % 2].wait();
  st.grad_of[i % 2] = -1;  // consumed: the slot is refilled for shard i + 2
  return st.grad[i % 2].narrow(0, 0, shards_[i].grad.numel());
}

void ShardedModel::masters_changed(size_t i) {
  if (offload_ == Offload::None) return;  // remade at the next gather
  const int unit = shards_[i].unit;
  if (offload_ == Offload::Full && param_dtype_ == at::kFloat) return;  // the master is what is sent
  fill_cast(unit, i % 2, /*wait=*/false);
}

}  // namespace wmtp
