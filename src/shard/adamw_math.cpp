// AdamW on flat fp32 ranges: one pass per element (host loop), or LibTorch's fused CUDA kernel.
#include "shard/adamw_math.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/version.h>

#include <cmath>

#include "core/error.h"

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define WMTP_HAVE_FUSED_ADAMW 1
#endif

namespace wmtp {

namespace {
// Elements per task: large enough that a thread's share streams through memory, small enough to
// spread a unit's shard over every thread.
constexpr int64_t kGrain = 1 << 15;

bool same_length_fp32(const at::Tensor& ref, const at::Tensor& t) {
  return t.defined() && t.dim() == 1 && t.numel() == ref.numel() && t.scalar_type() == at::kFloat &&
         t.device() == ref.device() && t.is_contiguous();
}

#ifndef WMTP_HAVE_FUSED_ADAMW
// torch.optim.AdamW(foreach=False) per range: what a LibTorch without the fused kernel does.
void adamw_op_chain(const AdamWRanges& r, const AdamWHyper& h) {
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step)), bc2 = 1.0 - std::pow(h.beta2, double(h.step));
  for (size_t i = 0; i < r.params.size(); ++i) {
    at::Tensor p = r.params[i], m = r.exp_avgs[i], v = r.exp_avg_sqs[i];
    p.mul_(1 - h.lr * h.weight_decay);
    m.mul_(h.beta1).add_(r.grads[i], 1 - h.beta1);
    v.mul_(h.beta2).addcmul_(r.grads[i], r.grads[i], 1 - h.beta2);
    p.addcdiv_(m, (v.sqrt() / std::sqrt(bc2)).add_(h.eps), -h.lr / bc1);
  }
}
#endif
}  // namespace

void AdamWRanges::add(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v) {
  WMTP_CHECK(p.dim() == 1 && p.scalar_type() == at::kFloat && p.is_contiguous(),
             "AdamW: a parameter range must be 1-D contiguous fp32");
  WMTP_CHECK(same_length_fp32(p, g) && same_length_fp32(p, m) && same_length_fp32(p, v),
             "AdamW: gradient and moments must match their parameter range (1-D contiguous fp32, same device)");
  WMTP_CHECK(params.empty() || params.front().device() == p.device(), "AdamW: ranges of one update on two devices");
  params.push_back(p), grads.push_back(g), exp_avgs.push_back(m), exp_avg_sqs.push_back(v);
}

void adamw_update_host(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                       const AdamWHyper& h) {
  // Scalars once, in double, then rounded to float as LibTorch rounds a Scalar for a float kernel.
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step)), bc2 = 1.0 - std::pow(h.beta2, double(h.step));
  const float decay = float(1.0 - h.lr * h.weight_decay);
  const float b1 = float(h.beta1), one_b1 = float(1.0 - h.beta1);
  const float b2 = float(h.beta2), one_b2 = float(1.0 - h.beta2);
  const float bc2_sqrt = float(std::sqrt(bc2)), eps = float(h.eps), step_size = float(-h.lr / bc1);
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i];
      const float m = exp_avg[i] * b1 + one_b1 * g;
      const float v = exp_avg_sq[i] * b2 + one_b2 * g * g;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      param[i] = param[i] * decay + step_size * (m / (std::sqrt(v) / bc2_sqrt + eps));
    }
  });
}

void adamw_update(const AdamWRanges& r, const AdamWHyper& h) {
  if (r.empty()) return;
  c10::NoGradGuard no_grad;
  const c10::Device device = r.params.front().device();
  if (device.is_cpu()) {
    for (size_t i = 0; i < r.params.size(); ++i)
      adamw_update_host(r.params[i].data_ptr<float>(), r.grads[i].data_ptr<float>(), r.exp_avgs[i].data_ptr<float>(),
                        r.exp_avg_sqs[i].data_ptr<float>(), r.params[i].numel(), h);
    return;
  }
#ifdef WMTP_HAVE_FUSED_ADAMW
  // The kernel reads the step count from a device scalar per tensor (torch.optim increments its
  // own before the call); one scalar, listed once per range, serves them all.
  const at::Tensor step = at::full({}, double(h.step), at::TensorOptions().dtype(at::kFloat).device(device));
  const std::vector<at::Tensor> steps(r.params.size(), step);
  at::_fused_adamw_(r.params, r.grads, r.exp_avgs, r.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, h.lr, h.beta1, h.beta2,
                    h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  adamw_op_chain(r, h);
#endif
}

}  // namespace wmtp
