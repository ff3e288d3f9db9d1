// MtpPolicyPipeline: the MTP policy side every policy pipeline shares (baseline, rho1, verifiable):
// the trained model is the MTP policy of [model]/[lora]; a micro-batch's forward/backward is the
// weighted MTP cross-entropy (model/mtp_pass.h) with MicroBatch::weights (undefined: uniform;
// [B, S] position weights; [B, S, K] per-head weights) normalised per head by the step's global
// counts (valid targets per head unless a subclass counts otherwise); validation reports the
// unweighted CE per head. train-baseline is this class with no weights.
//
// Step statistics (train/named_stats.h), declared in attach(); subclasses declare their own after
// calling it:
//   training    loss (the micro-batch's share of the step loss), weighted_sum / unweighted_sum
//               (CE sums per head), count (valid targets per head)
//   validation  unweighted_sum, count (per head)
#pragma once
#include <string>
#include <vector>

#include "model/mtp_pass.h"
#include "train/pipeline.h"

namespace wmtp {

class MtpPolicyPipeline : public Pipeline {
 public:
  void attach(const RunContext& ctx) override;
  std::vector<double> local_counts(const StepContext&, const std::vector<MicroBatch>& mbs) override;
  NamedStats forward_backward(const StepContext&, const MicroBatch& mb, const std::vector<double>& counts) override;
  double finish_step(const StepContext&, const NamedStats& global, MetricsRecord& rec) override;
  NamedStats eval_batch(const MicroBatch& mb) override;
  double finish_eval(const NamedStats& global, MetricsRecord& rec) override;

 protected:
  // Valid targets per head of each micro-batch (labels != -100 at the head's target positions).
  std::vector<double> valid_counts(const std::vector<MicroBatch>& mbs) const;
  int64_t n_future() const;
  // The host copy of a micro-batch when the trainer kept one (then reading counts is no device sync).
  static const Batch& host_or_device(const MicroBatch& mb);
  // forward_backward with the normalising counts as a [K] tensor (the host's, or counted on the
  // device: rho1's selected tokens). The figures stay on the device (the step reads them once).
  NamedStats train_pass(const MicroBatch& mb, const at::Tensor& counts);

  RunContext ctx_;
  MtpPassOptions step_opts_;
  StatLayout train_stats_, eval_stats_;
};

// train-baseline: uniform token weights.
class BaselinePipeline final : public MtpPolicyPipeline {
 public:
  std::string name() const override { return "baseline"; }
};

}  // namespace wmtp
