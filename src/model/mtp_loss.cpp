// Weighted MTP cross-entropy: per-head sums and counts, head weight selection, normalization.
#include "model/mtp_loss.h"

#include <ATen/ATen.h>

#include "core/error.h"

namespace wmtp {

at::Tensor head_token_ce(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t V = logits.size(-1);
  at::Tensor logp = at::log_softmax(logits.reshape({-1, V}).to(at::kFloat), -1);
  // ignore_index gives 0 loss at masked positions.
  return at::nll_loss(logp, targets.reshape({-1}), {}, at::Reduction::None, kIgnoreIndex).view(targets.sizes());
}

HeadCeSums head_ce_sums(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& weights) {
  at::Tensor ce = head_token_ce(logits, targets).reshape({-1});
  at::Tensor m = targets.reshape({-1}).ne(kIgnoreIndex);
  HeadCeSums out;
  out.count = m.sum().item<int64_t>();
  out.unweighted = ce.sum();
  if (weights.defined()) {
    // where(), not w * m: a non-finite weight on an ignored position must not turn into NaN.
    at::Tensor w = at::where(m, weights.reshape({-1}).to(at::kFloat).detach(), at::zeros({}, ce.options()));
    out.weighted = (ce * w).sum();
  } else {
    out.weighted = out.unweighted;
  }
  return out;
}

at::Tensor head_weights(const at::Tensor& weights, int64_t k, int64_t begin, int64_t len, int64_t n_heads) {
  if (!weights.defined()) return weights;
  if (weights.dim() == 2) return weights.narrow(1, k + begin, len);  // weight of the target token
  if (weights.dim() == 3) {
    if (weights.size(2) != n_heads)
      throw_usage("MTP loss: per-head weights have ", weights.size(2), " heads, the model has ", n_heads);
    return weights.narrow(1, begin, len).select(2, k - 1);  // weight of (source position, head)
  }
  throw_usage("MTP loss: weights must be [B, S] or [B, S, K], got ", weights.sizes());
}

std::vector<int64_t> count_valid_targets(const at::Tensor& labels, int64_t n_heads) {
  const int64_t S = labels.size(1);
  // Cumulative counts from the right: valid targets of head k = valid labels at positions >= k.
  at::Tensor per_pos = labels.ne(kIgnoreIndex).sum(0).to(at::kLong).cpu();  // [S]
  auto acc = per_pos.accessor<int64_t, 1>();
  std::vector<int64_t> suffix(S + 1, 0);
  for (int64_t t = S - 1; t >= 0; --t) suffix[t] = suffix[t + 1] + acc[t];
  std::vector<int64_t> out(n_heads, 0);
  for (int64_t k = 1; k <= n_heads; ++k) out[k - 1] = k < S ? suffix[k] : 0;
  return out;
}

MtpCeSums mtp_ce_sums(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& weights) {
  const int64_t S = logits.size(1), K = logits.size(2);
  if (labels.sizes() != logits.sizes().slice(0, 2))
    throw_usage("MTP loss: labels ", labels.sizes(), " do not match logits ", logits.sizes());
  MtpCeSums out;
  for (int64_t k = 1; k <= K; ++k) {
    const int64_t L = S - k;
    if (L <= 0) {
      at::Tensor zero = at::zeros({}, logits.options().dtype(at::kFloat));
      out.weighted.push_back(zero);
      out.unweighted.push_back(zero);
      out.count.push_back(0);
      continue;
    }
    HeadCeSums h = head_ce_sums(logits.narrow(1, 0, L).select(2, k - 1), labels.narrow(1, k, L),
                                head_weights(weights, k, 0, L, K));
    out.weighted.push_back(h.weighted);
    out.unweighted.push_back(h.unweighted);
    out.count.push_back(h.count);
  }
  return out;
}

int64_t count_contributing_heads(const std::vector<double>& norm_counts) {
  int64_t n = 0;
  for (double c : norm_counts) n += c > 0 ? 1 : 0;
  return n;
}

at::Tensor mtp_loss_from_sums(const std::vector<at::Tensor>& head_sums, const std::vector<double>& norm_counts) {
  WMTP_CHECK(head_sums.size() == norm_counts.size(), "heads ", head_sums.size(), " vs counts ", norm_counts.size());
  const int64_t n = count_contributing_heads(norm_counts);
  at::Tensor total;
  for (size_t k = 0; k < head_sums.size(); ++k) {
    if (norm_counts[k] <= 0) continue;
    at::Tensor term = head_sums[k] / (norm_counts[k] * static_cast<double>(n));
    total = total.defined() ? total + term : term;
  }
  if (!total.defined()) return at::zeros({}, at::TensorOptions().dtype(at::kFloat));
  return total;
}

MtpCeMean mtp_ce_mean(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& weights) {
  MtpCeSums s = mtp_ce_sums(logits, labels, weights);
  std::vector<double> counts(s.count.begin(), s.count.end());
  return {mtp_loss_from_sums(s.weighted, counts), mtp_loss_from_sums(s.unweighted, counts)};
}

}  // namespace wmtp
