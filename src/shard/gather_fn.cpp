// GatherFn: the autograd node between a unit's fp32 master shard and its gathered flat buffer.
#include "shard/gather_fn.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace wmtp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct GatherFn : public torch::autograd::Function<GatherFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& master, const at::Tensor& gathered, int64_t reducer,
                            int64_t unit) {
    ctx->saved_data["reducer"] = reducer;
    ctx->saved_data["unit"] = unit;
    // A new TensorImpl over the same storage: returning `gathered` itself would make the output a
    // view of an input, and the storage must stay the one the engine frees and refills.
    return tensor_over(gathered.storage(), gathered.numel(), gathered.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (grads[0].defined()) {
      auto* reducer = reinterpret_cast<GradReducer*>(ctx->saved_data["reducer"].toInt());
      reducer->reduce_grad(static_cast<int>(ctx->saved_data["unit"].toInt()), grads[0]);
    }
    // The engine accumulates into its own fp32 shard gradient; the master's .grad stays unused.
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor tensor_over(const c10::Storage& storage, int64_t numel, at::ScalarType dtype) {
  at::Tensor t = at::empty({0}, at::TensorOptions().dtype(dtype).device(storage.device()));
  t.set_(storage, 0, {numel}, {1});
  return t;
}

at::Tensor attach_gather(const at::Tensor& master, const at::Tensor& gathered, GradReducer* reducer, int unit) {
  return GatherFn::apply(master, gathered, reinterpret_cast<int64_t>(reducer), static_cast<int64_t>(unit));
}

}  // namespace wmtp
