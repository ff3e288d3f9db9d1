// The unbiased pass@k estimator in product form.
#include "eval/pass_at_k.h"

#include "core/error.h"

namespace wmtp {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (n < 1 || c < 0 || c > n || k < 1 || k > n)
    throw_usage("pass@k needs 0 <= c <= n and 1 <= k <= n (n ", n, ", c ", c, ", k ", k, ")");
  if (n - c < k) return 1.0;
  double all_fail = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) all_fail *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - all_fail;
}

std::vector<int64_t> pass_at_k_list(int64_t n) {
  std::vector<int64_t> ks;
  for (int64_t k : {1, 5, 10, 20})
    if (k <= n && (k < 20 || n >= 20)) ks.push_back(k);
  return ks;
}

}  // namespace wmtp
