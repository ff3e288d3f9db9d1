// Verifiable WMTP token weights (docs/verifiable.md): a frozen critic's
// values turn into the [B, S] position weights of the MTP loss (the weight of the TARGET token, the
// same for every head that predicts it; mtp_forward_backward applies them).
//
//   mask     m[t] = labels[t] != -100 (solution tokens); T = the last t with m[t]
//   values   v[t] = critic value of the prefix ending at t
//   GAE      reward-free, γ = 1: δ_t = v_t − v_{t−1} (v_{−1} = initial_value),
//            A_t = δ_t + λ·A_{t+1} for t = T down to 0 (A_{T+1} = 0), then A ← A·m
//            λ = 1: A_t = (R − v_t)·m — weighted_mtp's Monte-Carlo shortcut, kept as it is (it is NOT
//            the λ → 1 limit of the scan, which is v_T − v_{t−1}); R = 1, the trained sequences being
//            correct solutions
//   whiten   z = (A − μ) / (σ + 1e-8) with the EMA's μ, σ (training) or the micro-batch's mean and
//            unbiased std over its valid tokens (validation; ≤ 1 valid token: w = m)
//   weights  w = clamp(exp(z / β), clip_min, clip_max) · m   (no renormalization to mean 1)
//
// Precision (departure from weighted_mtp, docs/verifiable.md): the scan and the weights are computed
// in double from the values widened to double (weighted_mtp kept the GAE targets in the critic's
// bf16), on the values' device (losses/discounted_sum.h: nothing is read back to the host); the
// weights are handed to the loss in fp32.
//
// TdStatsEma: the whitening statistics. Initial mean 0, std 1; updated once per optimizer step
// from the step's global sum, sum of squares and count of the valid advantages (every micro-batch
// of every rank, reduced in float64): batch mean, population std sqrt(max(E[x²] − mean², 1e-8));
// step_count += 1; during warm-up (step_count ≤ warmup) ema = a·ema + (1 − a)·batch with
// a = (step_count − 1)/warmup (the first update replaces the initial values), afterwards
// ema = (1 − momentum)·ema + momentum·batch. The weights of a step use the statistics from before
// its update, so the first step whitens with (0, 1). A step with no valid token anywhere leaves the
// EMA untouched. The state (mean, std, step count) goes into every checkpoint.
//
// TdSums: the per-token statistics of a micro-batch as sums and maxima, so that one reduction over
// micro-batches and ranks gives the step's exact metrics (td/*, weight/*, value/mse) and the EMA's
// inputs.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wmtp {

class TrainState;

// The weighting's knobs, part of the [verifiable] section (defaults: weighted_mtp's production values).
struct TdWeightConfig {
  double td_lambda = 0.95;
  double initial_value = 0.5;
  double beta = 1.0;
  double weight_clip_min = 0.1;
  double weight_clip_max = 3.0;
  double td_ema_momentum = 0.1;
  int64_t td_ema_warmup_steps = 10;
  template <class V>
  void visit(V& v) {
    v.field(
        "td_lambda", td_lambda,
        "GAE lambda in [0, 1] (gamma is 1); 1 = weighted_mtp's Monte-Carlo shortcut A = (1 - v) on solution tokens");
    v.field("initial_value", initial_value, "v_{-1}: the value before the first token");
    v.field("beta", beta, "temperature of the exponential weights w = exp(z / beta) (> 0)");
    v.field("weight_clip_min", weight_clip_min, "lower clamp of the weights (> 0)");
    v.field("weight_clip_max", weight_clip_max, "upper clamp of the weights (>= weight_clip_min)");
    v.field("td_ema_momentum", td_ema_momentum, "EMA momentum of the advantage mean/std after warm-up, in (0, 1]");
    v.field("td_ema_warmup_steps", td_ema_warmup_steps,
            "optimizer steps of EMA warm-up (running average; step 1 replaces the initial mean 0 / std 1)");
  }
  // Throws Error(Usage) naming the [verifiable] key and the expected range.
  void validate() const;
};

// m = labels != -100, bool [B, S].
at::Tensor solution_mask(const at::Tensor& labels);

// GAE advantages [B, S] float64 on the values' device, 0 outside the mask. values: [B, S] or [B, S, 1], any
// float dtype and device; mask: [B, S] (bool or integer). td_lambda == 1 takes the shortcut.
at::Tensor gae_advantage(const at::Tensor& values, const at::Tensor& mask, double td_lambda, double initial_value,
                         double reward = 1.0);

struct WhiteningStats {
  double mean = 0.0, std = 1.0;
};

// Sums and maxima of one micro-batch's valid tokens (see the file comment). Layout in NamedStats:
// kSums entries in `sum` and kMaxes in `max`, at the offsets the caller chooses.
struct TdSums {
  double count = 0;  // valid (solution) tokens
  double adv_sum = 0, adv_sumsq = 0;
  double w_sum = 0, w_sumsq = 0;
  double w_entropy = 0;                       // sum of -w log(w + 1e-10)
  double clipped = 0;                         // raw exp weights outside [clip_min, clip_max]
  double value_se = 0;                        // sum of (v - 1)^2
  double w_max = -1e300, neg_w_min = -1e300;  // maxima (empty: -1e300, so the reduction ignores them)
  static constexpr size_t kSums = 8, kMaxes = 2;
  void append_to(std::vector<double>& sum, std::vector<double>& max) const;
  static TdSums read(const std::vector<double>& sum, size_t sum_offset, const std::vector<double>& max,
                     size_t max_offset);
  void accumulate(const TdSums& o);
};

// Metrics of reduced sums (0 where no token). Std are unbiased (torch.std, as weighted_mtp).
struct TdMetrics {
  double td_mean = 0, td_std = 0;
  double weight_mean = 0, weight_std = 0, weight_min = 0, weight_max = 0, weight_entropy = 0, clipping_ratio = 0;
  double value_mse = 0;
};
TdMetrics td_metrics(const TdSums& s);

struct TokenWeights {
  at::Tensor advantage;  // [B, S] float64 on the device of `values`
  at::Tensor weights;    // [B, S] float32 on the device of `values`
  // TdSums' figures on the same device, unread: [kSums] and [kMaxes] double in its order.
  at::Tensor sums, maxes;
  TdSums read_sums() const;  // one host read (tests)
};

// values -> GAE -> whitening with `stats` (the EMA's) or, when nullopt, the batch's own statistics
// -> clamped exponential weights, with the micro-batch's sums.
TokenWeights verifiable_weights(const at::Tensor& values, const at::Tensor& labels, const TdWeightConfig& cfg,
                                const std::optional<WhiteningStats>& stats);

class TdStatsEma {
 public:
  TdStatsEma(double momentum, int64_t warmup_steps);
  WhiteningStats stats() const { return {mean_, std_}; }
  int64_t step_count() const { return step_count_; }
  // One optimizer step's global sums over the valid advantages. count == 0: no update.
  void update(double sum, double sumsq, double count);
  // Keys <prefix>.mean, <prefix>.std (double), <prefix>.step_count (int64). load() throws
  // Error(Input) naming a missing key: a resume without the EMA would silently change the weights.
  void save(TrainState& st, const std::string& prefix) const;
  void load(const TrainState& st, const std::string& prefix);

 private:
  double momentum_;
  int64_t warmup_;
  double mean_ = 0.0, std_ = 1.0;
  int64_t step_count_ = 0;
};

}  // namespace wmtp
