// The engine's private records, shared by sharded_model.cpp (values, gradients, memory) and
// sharded_model_gather.cpp (gathering, freeing, prefetching). Not part of the engine's interface.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/core/StorageImpl.h>

#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/device.h"
#include "shard/sharded_model.h"

namespace wmtp {

using WeakStorage = c10::weak_intrusive_ptr<c10::StorageImpl>;

inline int64_t element_size(at::ScalarType t) { return static_cast<int64_t>(c10::elementSize(t)); }

struct ShardedModel::Gathered {
  c10::Storage trainable, frozen;
  bool any() const { return trainable || frozen; }
};

struct ShardedModel::Unit {
  const UnitPlan* plan = nullptr;
  at::Tensor master;      // fp32 trainable elements this rank holds (shard or replica); host when offloaded
  at::Tensor grad;        // fp32, same size; host under offload "full"
  at::Tensor frozen;      // param_dtype frozen elements this rank holds; host under offload "full"
  at::Tensor local_grad;  // no_sync: fp32 gradient of the whole flat buffer, accumulated
  // param_dtype copy of `master`, made once per optimizer step: on the device (not made for fp32
  // without offload: the master itself is sent), on the host under offload "full" (not for fp32).
  at::Tensor cast;
  bool cast_valid = false;  // offload: `cast` (kept allocated) holds the current masters
  std::vector<int64_t> t_split, f_split;
  std::vector<Gathered> active;  // begun, not yet ended
  Gathered kept;                 // kept after a forward without grad for the next begin_unit
  bool reshard = true;           // set_reshard_after_forward
  bool immediate = false;        // learned: its backward follows its forward directly
  int64_t last_end_event = -1;   // begin_events_ at its last end_unit that freed or kept its buffers
};

// A gather into `storage` (which already has its memory); `work` is null once complete.
struct ShardedModel::Fill {
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

// A unit gathered ahead of need: fresh buffers for a predicted begin_unit (`awaiting_id` < 0), or the
// released storages of an awaiting unit instance refilled for its predicted backward.
struct ShardedModel::Prefetch {
  int unit = -1;
  bool backward = false;     // for a begin_unit inside the backward pass (recompute)
  int64_t awaiting_id = -1;  // refill for this Awaiting entry
  std::vector<Fill> fills;
  void wait() {
    for (Fill& f : fills) f.wait();
  }
};

// A unit instance whose forward built a graph and whose backward has not come yet.
struct ShardedModel::Awaiting {
  int64_t id = 0;
  int unit = -1;
  int64_t end_event = 0;                               // begin_events_ at its end_unit
  std::vector<std::pair<bool, WeakStorage>> storages;  // (trainable, buffer)
  bool kept = false;  // not freed at end_unit (may be freed later, before another unit begins)
};

// Offload "optimizer": two slots each of pinned host memory for gradients coming down and
// param_dtype copies going up, so one slot's copy runs while the CPU works on the other.
struct ShardedModel::Staging {
  at::Tensor grad[2], cast[2];    // sized for the largest trainable shard
  StreamFence grad_ready[2];      // the download into the slot has landed
  StreamFence cast_sent[2];       // the upload from the slot has left (the slot may be refilled)
  int64_t grad_of[2] = {-1, -1};  // trainable shard index whose gradient the slot holds
};

// An asynchronous reduce-scatter of one unit's gradient into its shard gradient.
struct ShardedModel::PendingReduce {
  int unit = -1;
  at::Tensor out;  // this rank's block of the sum (reduce_dtype)
  CommWorkPtr work;
};

}  // namespace wmtp
