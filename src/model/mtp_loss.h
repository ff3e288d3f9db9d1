// Weighted multi-token cross-entropy (docs/model.md, "Loss"; the step's global counts: docs/training.md).
// Head k (1-based, k = 1..K) at source position t predicts token t+k:
//   predictions logits[:, 0:S-k, k-1], targets labels[:, k:S], mask m = target != -100.
// Weights: undefined (w = 1); [B, S] position weights of the TARGET token (w = weights[:, k:S], the
// same weight for every head that predicts that token); [B, S, K] per head and SOURCE position
// (w = weights[:, 0:S-k, k-1]). Weights carry no gradient.
// Softmax/CE always in fp32, whatever the logits dtype.
// Functions return per-head SUMS and valid-token COUNTS, so the trainer can normalize by the step's
// global count (all ranks, all micro-batches): head loss = weighted_sum_k / norm_count_k and the
// total is the mean over heads whose norm count is > 0.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "core/labels.h"
#include <vector>

namespace wmtp {


// Per-token CE in fp32: logits [B, L, V] (any float dtype), targets [B, L] -> [B, L], 0 where the
// target is -100 (rho1's excess loss and the reference model's CE use it directly).
at::Tensor head_token_ce(const at::Tensor& logits, const at::Tensor& targets);

// One head: logits [B, L, V] (any float dtype), targets [B, L] int64, weights [B, L] or undefined.
struct HeadCeSums {
  at::Tensor weighted;    // scalar fp32, differentiable: sum(ce * w * m)
  at::Tensor unweighted;  // scalar fp32, differentiable: sum(ce * m)
  int64_t count = 0;      // sum(m)
};
HeadCeSums head_ce_sums(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& weights);

// The weights head k (1-based) uses for source positions [begin, begin+len), as [B, len], or an
// undefined tensor when `weights` is undefined. Throws Error(Usage) for an unsupported shape.
at::Tensor head_weights(const at::Tensor& weights, int64_t k, int64_t begin, int64_t len, int64_t n_heads);

// Per head k = 1..n_heads: number of labels[:, k:] != -100 (0 when k >= S).
std::vector<int64_t> count_valid_targets(const at::Tensor& labels, int64_t n_heads);

// All heads at once from logits [B, S, K, V]. Heads with S - k <= 0 get zero sums.
struct MtpCeSums {
  std::vector<at::Tensor> weighted, unweighted;  // per head, scalar fp32, differentiable
  std::vector<int64_t> count;
};
MtpCeSums mtp_ce_sums(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& weights);

// mean over heads with norm_counts[k] > 0 of head_sums[k] / norm_counts[k]; zero (no grad) if none.
at::Tensor mtp_loss_from_sums(const std::vector<at::Tensor>& head_sums, const std::vector<double>& norm_counts);
// The number of heads the mean runs over.
int64_t count_contributing_heads(const std::vector<double>& norm_counts);

// Convenience: the local mean (normalized by this batch's own counts), weighted_mtp's
// compute_mtp_ce_loss. weighted/unweighted are differentiable scalars.
struct MtpCeMean {
  at::Tensor weighted, unweighted;
};
MtpCeMean mtp_ce_mean(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& weights);

}  // namespace wmtp
