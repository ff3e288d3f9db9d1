// The gather as an autograd function (docs/sharding.md). Forward: a unit's gathered flat buffer (param_dtype),
// already filled by the engine — blocking, or by a prefetch that was started early. Backward: the
// gradient of the whole flat buffer goes to GradReducer::reduce_grad, which reduce-scatters (or, under
// no_sync, accumulates) it into the fp32 shard gradient. Because it is an ordinary autograd node, a
// recomputation under activation checkpointing simply records another gather.
#pragma once
#include <ATen/core/Tensor.h>

namespace wmtp {

class GradReducer {
 public:
  virtual ~GradReducer() = default;
  // `full_grad`: gradient of the unit's whole (padded) flat buffer, in param_dtype. Called on the
  // thread that runs the backward pass.
  virtual void reduce_grad(int unit, const at::Tensor& full_grad) = 0;
};

// A new tensor (its own TensorImpl and version counter) over `gathered`'s storage, recorded as a
// function of `master` (which must require grad). `reducer` must outlive the graph.
at::Tensor attach_gather(const at::Tensor& master, const at::Tensor& gathered, GradReducer* reducer, int unit);

// A fresh 1-D tensor of `numel` elements of `dtype` over `storage` (not a view: own version counter,
// so writing through it never invalidates tensors autograd saved from another tensor of the storage).
at::Tensor tensor_over(const c10::Storage& storage, int64_t numel, at::ScalarType dtype);

}  // namespace wmtp
