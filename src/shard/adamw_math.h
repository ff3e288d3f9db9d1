// AdamW's arithmetic on flat fp32 ranges with every element read and written once — the update of
// torch.optim.AdamW(fused=True) — instead of a chain of whole-tensor operations (seven passes over
// memory and two temporaries per range). ShardedAdamW calls it on the shards it owns; an optimizer
// that keeps its shards in host memory calls the host variant on them directly.
//
// Per element, in this order (decoupled weight decay, then Adam with bias correction):
//   p *= 1 - lr * wd;  m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// which is torch.optim.AdamW's update; results agree with its op chain to fp32 rounding.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace wmtp {

struct AdamWHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;  // this update's step count, from 1 (bias correction)
};

// The host variant: `n` elements at raw pointers into CPU memory, over LibTorch's intra-op threads.
void adamw_update_host(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                       const AdamWHyper& h);

// Ranges of one parameter group: four lists of equally long 1-D contiguous fp32 tensors (views into
// flat shards are fine), all on one device.
struct AdamWRanges {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  void add(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v);
  bool empty() const { return params.empty(); }
};

// One update of every range: CPU tensors through the host variant; CUDA tensors through one fused
// multi-tensor kernel (at::_fused_adamw_, LibTorch >= 2.1), or with an older LibTorch the per-range
// operation chain of torch.optim.AdamW.
void adamw_update(const AdamWRanges& ranges, const AdamWHyper& h);

}  // namespace wmtp
