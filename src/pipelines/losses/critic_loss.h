// Critic losses and diagnostics (docs/critic.md). The critic reads a
// pair batch as ONE [2B, S] forward: rows [0, B) are the correct solutions (reward 1), rows
// [B, 2B) the incorrect ones (reward 0), row i pairing with row B + i. Solution tokens are the
// positions with labels != -100 (prompt and padding are -100).
//
//   pairwise       v̄ = sum(V·m) / (sum(m) + 1e-8) per sequence; loss = coef · mean over pairs of
//                  −log σ(v̄_pos − v̄_neg)  (Bradley–Terry)
//   lambda_return  targets G (no gradient, from the detached V): G_T = R at the last non-padding
//                  position T, G_t = (1−λ)γV_{t+1} + λγG_{t+1} for every t < T (prompt included);
//                  token loss (V−G)² or smooth-L1 with beta = huber_delta; per sequence the mean
//                  over its solution tokens; L_pos, L_neg = mean over the sequences that have
//                  solution tokens; loss = coef · (L_pos + L_neg) / 2
//
// Means over pairs and sequences use the step's GLOBAL counts (every micro-batch of every rank):
// critic_local_counts gives one micro-batch's {pairs, pos sequences, neg sequences}, the pipeline
// sums them over the step, critic_loss_terms returns the unnormalized sums and critic_loss divides
// them by the global counts. Summed over micro-batches and ranks, the normalized losses are the step
// loss, whatever the world size and accumulation.
//
// Diagnostics (no gradient) are sums too (critic_metric_sums) so they reduce exactly across ranks.
// Values are computed in fp32 (losses) and fp64 (targets, diagnostics) whatever V's dtype.
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <vector>

namespace wmtp {

enum class CriticLoss { Pairwise, LambdaReturn };        // [critic] loss
enum class CriticTokenLoss { Huber, Mse };               // [critic] loss_fn
enum class LambdaSchedule { Constant, Linear, Cosine };  // [critic] lambda_schedule (constant: λ = lambda_start)

struct CriticLossConfig {
  CriticLoss type = CriticLoss::Pairwise;
  double coef = 1.0;
  // lambda_return only
  CriticTokenLoss loss_fn = CriticTokenLoss::Huber;
  double gamma = 1.0;
  double huber_delta = 0.5;
  LambdaSchedule lambda_schedule = LambdaSchedule::Linear;
  double lambda_start = 1.0;
  double lambda_end = 0.95;
  int64_t lambda_warmup_steps = 250;  // steps λ holds lambda_start
  int64_t lambda_decay_steps = 500;   // steps of the decay to lambda_end

  template <class V>
  void visit(V& v) {
    v.choice("loss", type, {"pairwise", "lambda_return"},
             "pairwise: Bradley-Terry on mean solution values; lambda_return: regression to lambda-returns");
    v.field("coef", coef, "loss coefficient");
    v.choice("loss_fn", loss_fn, {"huber", "mse"}, "lambda_return token loss (huber = smooth-L1)");
    v.field("gamma", gamma, "lambda_return discount");
    v.field("huber_delta", huber_delta, "smooth-L1 beta of the huber token loss");
    v.choice("lambda_schedule", lambda_schedule, {"constant", "linear", "cosine"},
             "lambda over optimizer steps: constant = lambda_start; linear/cosine: hold lambda_start for "
             "lambda_warmup_steps, then decay to lambda_end over lambda_decay_steps");
    v.field("lambda_start", lambda_start, "lambda during the hold (and the constant value)");
    v.field("lambda_end", lambda_end, "lambda after the decay");
    v.field("lambda_warmup_steps", lambda_warmup_steps, "optimizer steps lambda holds lambda_start");
    v.field("lambda_decay_steps", lambda_decay_steps, "optimizer steps of the decay to lambda_end");
  }
  // Throws Error(Usage) naming the [critic] key: coef/gamma/huber_delta, λ in [0, 1], steps >= 0.
  void validate() const;
  bool pairwise() const { return type == CriticLoss::Pairwise; }
};

// λ at optimizer step `step` (steps completed before this one). Validation always uses λ = 1.
double scheduled_lambda(const CriticLossConfig& cfg, int64_t step);

// v̄ per row: [N, S] values (any float dtype, differentiable) -> [N] fp32.
at::Tensor masked_mean_values(const at::Tensor& values, const at::Tensor& labels);

// λ-return targets [N, S] in fp64 on the values' device (no gradient, no host read:
// losses/discounted_sum.h): rewards[i] is row i's R; a row without solution tokens or without any
// token gets zeros. Positions after T are 0.
at::Tensor lambda_return_targets(const at::Tensor& values, const at::Tensor& labels, const at::Tensor& attention_mask,
                                 const std::vector<double>& rewards, double gamma, double lam);

// One micro-batch's normalizers {pairs, pos sequences with solution tokens, neg sequences with
// solution tokens}; labels [2B, S], read on the host (pass the host copy: a device one is read back).
constexpr int kCriticCounts = 3;
std::vector<double> critic_local_counts(const at::Tensor& labels);

// Unnormalized sums of one micro-batch (fp32 scalars, differentiable through `values`). Only the
// terms of cfg.type are defined.
struct CriticLossTerms {
  at::Tensor pairwise;    // Σ over pairs of −log σ(v̄_pos − v̄_neg)
  at::Tensor lambda_pos;  // Σ over pos sequences with solution tokens of their mean token loss
  at::Tensor lambda_neg;
};
CriticLossTerms critic_loss_terms(const at::Tensor& values, const at::Tensor& labels, const at::Tensor& attention_mask,
                                  const CriticLossConfig& cfg, double lam);

// coef · pairwise / pairs, or coef · (lambda_pos / pos_seqs + lambda_neg / neg_seqs) / 2 with a
// term dropped when its count is 0 (zero, without gradient, when nothing counts).
at::Tensor critic_loss(const CriticLossTerms& terms, const CriticLossConfig& cfg, const std::vector<double>& counts);

// ---- diagnostics (reference names; per-sequence figures averaged over sequences) ----
enum CriticMetricSum : int {
  kPairs = 0,
  kCorrectPairs,  // v̄_pos > v̄_neg
  kMeanPosSum,    // Σ v̄_pos
  kMeanNegSum,
  kPosVarSum,  // Σ per-sequence variance of V over solution tokens (population)
  kNegVarSum,
  kPosSpikeSum,  // Σ max|ΔV| / (mean|ΔV| + 1e-8), ΔV over consecutive solution tokens
  kNegSpikeSum,
  kPosAbsTdSum,  // Σ mean|ΔV|
  kNegAbsTdSum,
  kPosCorrSum,  // Σ Pearson(V, position) over sequences with >= 3 solution tokens
  kNegCorrSum,
  kPosCorrSeqs,  // how many sequences that is
  kNegCorrSeqs,
  kCriticMetricSums
};
// values [2B, S] (detached or not; read as fp64), labels [2B, S]: [kCriticMetricSums] double on the
// values' device, in the order above (unread: a step reads it with its other statistics).
at::Tensor critic_metric_sums(const at::Tensor& values, const at::Tensor& labels);

struct CriticMetrics {
  double pairwise_accuracy = 0, mean_pos = 0, mean_neg = 0, margin = 0;
  double pos_token_variance = 0, neg_token_variance = 0, pos_spikiness = 0, neg_spikiness = 0;
  double pos_mean_abs_td = 0, neg_mean_abs_td = 0, pos_position_corr = 0, neg_position_corr = 0;
};
// From sums reduced over micro-batches and ranks (the first kCriticMetricSums entries of `sums`).
CriticMetrics critic_metrics(const double* sums);

}  // namespace wmtp
