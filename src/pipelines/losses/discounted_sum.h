// The reverse discounted sum x_t = c_t + rho * x_{t+1} (x past the end = 0) on the device: the scan
// behind verifiable's GAE advantages and the critic's lambda-return targets, written so nothing waits
// for the device (a host loop would read every value back, once per micro-batch).
#pragma once
#include <ATen/core/Tensor.h>

namespace wmtp {

// Over the last dimension of `c` (any leading dimensions), in c's dtype and on its device. Blocks
// of 64 positions: inside a block a product with the [64, 64] matrix of rho powers, across blocks
// one carry from the block after; so the rounding differs from a sequential scan by a few ulps (in
// double, far below anything the losses see), and no power of rho below rho^64 is formed.
at::Tensor reverse_discounted_sum(const at::Tensor& c, double rho);

}  // namespace wmtp
