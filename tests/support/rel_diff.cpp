// rel_diff.h's relative difference.
#include "rel_diff.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace wmtp::test {

double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor da = a.detach().to(at::kCPU, at::kDouble), db = b.detach().to(at::kCPU, at::kDouble);
  const double num = (da - db).abs().max().item<double>();
  const double den = db.abs().max().item<double>();
  return den > 0 ? num / den : num;
}

double rel_diff(double a, double b) {
  const double num = std::abs(a - b), den = std::abs(b);
  return den > 0 ? num / den : num;
}

double rel_diff(const std::unordered_map<std::string, at::Tensor>& got,
                const std::unordered_map<std::string, at::Tensor>& expected, std::string* worst) {
  double m = 0;
  for (const auto& [k, v] : expected) {
    auto it = got.find(k);
    if (it == got.end()) {
      if (worst) *worst = k + " (missing)";
      return 1e30;
    }
    const double d = rel_diff(it->second, v);
    if (d > m || (worst && worst->empty())) {
      m = std::max(m, d);
      if (worst) *worst = k;
    }
  }
  return m;
}

}  // namespace wmtp::test
