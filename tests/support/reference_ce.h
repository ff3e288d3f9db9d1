// The tests' independent cross-entropy of multi-token logits: log-softmax in double and a loop over
// (row, head, position), no code of the library's loss path, so equivalence tests can compare with it.
#pragma once
#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>

namespace wmtp::test {

// CE of logits [B, S, K, V] per (b, t, head k) in double -> [B, S, K]: head k predicts labels[b][t + k + 1];
// NaN where there is no valid target (past the end, or label -100).
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
