// Reverse discounted sum on the device (pipelines/losses/discounted_sum.h).
#include "pipelines/losses/discounted_sum.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace wmtp {

at::Tensor reverse_discounted_sum(const at::Tensor& c, double rho) {
  const int64_t S = c.size(-1);
  if (S == 0) return c.clone();
  const int64_t C = std::min<int64_t>(S, 64), blocks = (S + C - 1) / C;
  const at::TensorOptions o = c.options();
  // within[j][i] = rho^(j - i) for j >= i: x_i = sum_j c_j within[j][i] + rho^(C - i) x_next
  const at::Tensor idx = at::arange(C, o);
  const at::Tensor d = idx.unsqueeze(1) - idx.unsqueeze(0);
  const at::Tensor within = at::where(d.ge(0), at::pow(rho, d.clamp_min(0)), at::zeros({}, o));
  const at::Tensor carry_weight = at::pow(rho, double(C) - idx);
  // Zeros past the end change nothing (x there is 0): pad to whole blocks.
  const at::Tensor padded = at::constant_pad_nd(c, {0, blocks * C - S});
  std::vector<at::Tensor> out(static_cast<size_t>(blocks));
  at::Tensor carry = at::zeros(c.sizes().slice(0, c.dim() - 1), o);  // x at the start of the next block
  for (int64_t b = blocks - 1; b >= 0; --b) {
    at::Tensor x = at::matmul(padded.narrow(-1, b * C, C), within) + carry.unsqueeze(-1) * carry_weight;
    carry = x.select(-1, 0);
    out[size_t(b)] = x;
  }
  return at::cat(out, -1).narrow(-1, 0, S);
}

}  // namespace wmtp
