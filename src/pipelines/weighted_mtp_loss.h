// WeightedMtpLoss: the loss every MTP policy pipeline trains with (pipelines/mtp_pipeline.h): the
// weighted MTP cross-entropy of the trained policy (model/mtp_pass.h) with a micro-batch's token
// weights (undefined: uniform; [B, S] position weights; [B, S, K] per-head weights), each head
// normalized by the step's counts, and the statistics and metrics of that loss. What differs between
// train-baseline, train-rho1 and train-verifiable is the token weighting (pipelines/token_weighting.h),
// which uses this loss and declares its own statistics beside the loss's.
//
// Step statistics (train/named_stats.h), declared in attach():
//   training    loss (the micro-batch's share of the step loss), weighted_sum / unweighted_sum
//               (CE sums per head), count (valid targets per head)
//   validation  unweighted_sum, weighted_sum, count (per head)
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "model/mtp_pass.h"
#include "train/pipeline.h"

namespace wmtp {

class WeightedMtpLoss {
 public:
  // Takes the trained model (the policy) and declares the statistics above in fresh layouts.
  void attach(const RunContext& ctx);

  const ModelHandle& policy() const { return *policy_; }
  int64_t n_future() const;
  const MtpPassOptions& pass_options() const { return pass_; }  // the run's, figures left on the device
  // The layouts of the step's and validation's statistics: a token weighting declares its own in
  // them after the loss's (TokenWeighting::attach).
  StatLayout& train_stats() { return train_stats_; }
  StatLayout& eval_stats() { return eval_stats_; }
  const StatLayout& train_stats() const { return train_stats_; }
  const StatLayout& eval_stats() const { return eval_stats_; }

  // The plan of a step without token weights: every micro-batch's valid targets per head
  // (labels != -100 at the head's target positions) as its counts, [M, K] float64 on the host,
  // counted from the host copies (no device sync).
  StepPlan plan(const std::vector<MicroBatch>& mbs) const;

  // Forward + backward of one micro-batch with `weights`, each head normalized by `counts` ([K]
  // float64, any device). The figures stay on the device: the step reads them once.
  NamedStats train(const MicroBatch& mb, const at::Tensor& weights, const at::Tensor& counts) const;
  // Validation (no grad, dropout off): the unweighted and the `weights`-weighted CE sums and the
  // valid targets per head.
  NamedStats eval(const MicroBatch& mb, const at::Tensor& weights) const;

  // train/loss and train/loss_head_k (the unweighted CE per head) from the reduced statistics;
  // returns the step loss.
  double finish_step(const NamedStats& global, MetricsRecord& rec) const;
  // val/loss (the mean over heads with targets of the unweighted CE) and val/loss_head_k; returns
  // val/loss.
  double finish_eval(const NamedStats& global, MetricsRecord& rec) const;

  // The host copy of a micro-batch when the trainer kept one (then reading counts is no device sync).
  static const Batch& cpu_or_device(const MicroBatch& mb);

 private:
  const ModelHandle* policy_ = nullptr;
  MtpPassOptions pass_;
  StatLayout train_stats_, eval_stats_;
};

}  // namespace wmtp
