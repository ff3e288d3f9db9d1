// pass@k by the unbiased estimator (Chen et al. 2021), as weighted_mtp computes it (docs/parity.md):
//   pass@k = 1 - C(n - c, k) / C(n, k)   (1 when n - c < k)
// in its product form 1 - prod_{i = n-c+1}^{n} (1 - k / i), which never forms a binomial (C(200, 100)
// overflows every integer type). Per task; the benchmark's figure is the mean over tasks. The k list:
// {1, 5, 10, 20} when n >= 20, else {1, 5, 10}; k > n skipped.
#pragma once
#include <cstdint>
#include <vector>

namespace wmtp {

// n samples, c correct (0 <= c <= n), 1 <= k <= n; Error(Usage) otherwise.
double pass_at_k(int64_t n, int64_t c, int64_t k);

// The k values reported for n samples per task.
std::vector<int64_t> pass_at_k_list(int64_t n);

}  // namespace wmtp
