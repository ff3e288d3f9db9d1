// The tests' own per-token CE of MTP logits, in double and written out loop by loop: the
// independent side of the rho1 tests (test_rho1_loss, test_rho1_equivalence).
#pragma once
#include <ATen/ATen.h>

#include <cmath>

namespace wmtp::test {

// CE of logits [B, S, K, V] per (b, t, head k) -> [B, S, K] double: head k at position t predicts
// labels[b][t + k]; NaN where that label is -100 or past the end.
inline at::Tensor double_token_ce(const at::Tensor& logits, const at::Tensor& labels) {
  const int64_t B = logits.size(0), S = logits.size(1), K = logits.size(2);
  at::Tensor logp = at::log_softmax(logits.to(at::kDouble), -1);
  at::Tensor ce = at::full({B, S, K}, std::nan(""), logits.options().dtype(at::kDouble));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 1; k <= K; ++k)
      for (int64_t t = 0; t + k < S; ++t) {
        const int64_t y = labels[b][t + k].item<int64_t>();
        if (y != -100) ce[b][t][k - 1] = -logp[b][t][k - 1][y];
      }
  return ce;
}

}  // namespace wmtp::test
