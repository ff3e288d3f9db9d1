// TokenWeighting: what one MTP policy pipeline adds to the weighted MTP loss (pipelines/
// weighted_mtp_loss.h), which weighs the policy's tokens with it. MtpPolicyPipeline
// (pipelines/mtp_pipeline.h) composes the two — as torchtitan composes a TrainSpec of a loss and its
// parts — and calls both in a fixed order; a weighting never calls back into a pipeline:
//
//   its config and checks     add_config, check, frozen_models (the models it reads to weigh tokens)
//   attach                    keeps what it reads (frozen models, the communicator, the log) and
//                             declares its statistics in the loss's layouts, after the loss's own
//   plan_step                 the step's plan: per micro-batch the token weights and the statistics
//                             measured while making them, and the counts each head is normalized by
//                             (loss.plan(mbs)'s valid targets, unless it normalizes otherwise)
//   finish_step               after the loss's train/* keys: its own, and its state updates (an EMA)
//   eval_batch, finish_eval   validation: a micro-batch's statistics, then its val/* keys after the
//                             loss's
//   state                     what must survive a resume (train/checkpointed.h): none by default
//
// train-baseline is UniformWeighting (mtp_pipeline.h); train-rho1 is Rho1Weighting
// (rho1_pipeline.h), train-verifiable VerifiableWeighting (verifiable_pipeline.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/pipeline.h"

namespace wmtp {

class WeightedMtpLoss;

class TokenWeighting : public Checkpointed {
 public:
  virtual std::string name() const = 0;  // the program is train-<name>

  virtual void add_config(ConfigSet&) {}
  // As Pipeline::check and Pipeline::frozen_models (train/pipeline.h).
  virtual void check(const PipelineSettings&) const {}
  virtual std::vector<ModelSpec> frozen_models(const PipelineSettings&, int64_t /*data_vocab*/) const { return {}; }
  virtual void attach(const RunContext&, WeightedMtpLoss&) {}

  // One optimizer step (collective): the plan of this rank's micro-batches, before any backward.
  virtual StepPlan plan_step(const StepContext& step_ctx, const std::vector<MicroBatch>& mbs,
                             const WeightedMtpLoss& loss) = 0;
  // `loss`: the step loss the weighted MTP loss reported (train/loss).
  virtual void finish_step(const StepContext&, const NamedStats& /*global*/, double /*loss*/, MetricsRecord&) {}

  // Validation (collective). eval_batch: the micro-batch's statistics in the loss's eval layout (by
  // default the loss's own, unweighted); finish_eval: after the loss's val/* keys, returns the
  // validation loss (lower is better; `loss`: the loss's val/loss).
  virtual NamedStats eval_batch(const MicroBatch& mb, const WeightedMtpLoss& loss);
  virtual double finish_eval(const NamedStats& /*global*/, double loss, MetricsRecord&) { return loss; }

  void save_state(TrainState&) const override {}
  void load_state(const TrainState&, const CheckpointReader&) override {}
};

}  // namespace wmtp
