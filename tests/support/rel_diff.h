// The tests' one relative difference of two tensors: max |a - b| / max |b|, norm-wise, so a tensor
// with entries that cancel to ~0 (moments, gradients) does not blow up the ratio as elementwise
// |a - b| / |b| would. Computed in double on the CPU, whatever the tensors' dtype and device.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <unordered_map>

namespace wmtp::test {

// max |a - b| / max |b|; max |a - b| when b is all zero.
double rel_diff(const at::Tensor& a, const at::Tensor& b);
// The same of two numbers: |a - b| / |b|; |a - b| when b is 0.
double rel_diff(double a, double b);
// The largest rel_diff over the keys of `expected`; a key missing from `got` counts as 1e30.
// `worst` (when given) names the key of the largest.
double rel_diff(const std::unordered_map<std::string, at::Tensor>& got,
                const std::unordered_map<std::string, at::Tensor>& expected, std::string* worst = nullptr);

}  // namespace wmtp::test
