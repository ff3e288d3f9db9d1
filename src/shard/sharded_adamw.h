// ShardedAdamW: AdamW on the engine's fp32 shards (docs/sharding.md), element for element the math of
// torch.optim.AdamW (decoupled decay p *= 1 - lr*wd, then Adam with bias correction), with learning
// rate and weight decay per parameter group (a shard slice spans several parameters, so groups are
// applied per segment), global gradient-norm clipping over all ranks' shards, and its state
// reachable as checkpoint pieces.
//
// One optimizer step:   model.zero_grad(); micro-batches forward/backward ...;
//                       double norm = opt.clip_grad_norm();   // pre-clip global norm (collective)
//                       opt.step();                             // collective only under no_sync
// Under [sharding] offload the moments live beside the host masters and step() runs on the CPU,
// shard by shard, the engine moving gradients down and param_dtype copies up around it.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shard/memory_stats.h"
#include "shard/optimizer_config.h"
#include "core/tensor_piece.h"

namespace wmtp {

class ShardedModel;

// Glob match of a parameter name: '*' matches any run of characters (dots included), '?' one.
bool match_fqn_pattern(const std::string& pattern, const std::string& fqn);

struct ParamGroup {
  std::string name;  // "default" or the pattern
  double peak_lr = 0.0;
  double lr = 0.0;  // current (set_lr_scale / set_group_lr)
  double weight_decay = 0.0;
  int64_t numel = 0;  // trainable elements in the group (whole model, not this rank)
};

enum class AdamState { ExpAvg, ExpAvgSq };

class ShardedAdamW {
 public:
  // Throws Error(Usage) for bad hyper-parameters or group lists of different lengths. State starts
  // at zero, step count 0. `model` must outlive the optimizer.
  ShardedAdamW(ShardedModel& model, const OptimizerConfig& cfg);

  // Completes the gradients (model.reduce_gradients), computes the global L2 norm over every rank's
  // shard (padding contributes zero) and, when max_norm > 0 and the norm exceeds it, scales all
  // gradients by max_norm / (norm + 1e-6) (torch.nn.utils.clip_grad_norm_). Returns the pre-clip
  // norm, the same on every rank. Collective: one all-reduce, which also sums `also_sum` (a small
  // tensor of the caller's per-step figures, any float dtype, replaced by its sum over ranks) so a
  // training step can do with this one collective after its backward. A non-finite norm (an Inf or
  // NaN in any rank's gradient) leaves the gradients alone, and the next step() refuses them.
  double clip_grad_norm(double max_norm, at::Tensor* also_sum = nullptr);
  double clip_grad_norm() { return clip_grad_norm(cfg_.max_grad_norm); }
  // clip_grad_norm in two halves, for a caller that reads the norm with its own figures (one host
  // read per step, train/train_step.cpp): local_grad_norm_sq() reduces the gradients and returns
  // this rank's squared norm, [1] double on the gradients' device, unread; clip_to_local_norm_sq()
  // takes it read to the host, all-reduces it (one collective) and clips as clip_grad_norm does.
  at::Tensor local_grad_norm_sq();
  double clip_to_local_norm_sq(double local_sq, double max_norm);
  double clip_to_local_norm_sq(double local_sq) { return clip_to_local_norm_sq(local_sq, cfg_.max_grad_norm); }
  // One AdamW update of every trainable element this rank holds; invalidates gathered copies.
  // Throws an agreed Error(Runtime) and changes nothing when the last clip_grad_norm() since
  // zero_grad() was not finite: the norm is all-reduced, so every rank refuses the same step.
  void step();
  void zero_grad();
  // This rank's trained parameters (fp32 masters) and moments are all finite. Local, not collective.
  bool state_is_finite() const;

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t step) { step_ = step; }

  const std::vector<ParamGroup>& groups() const { return groups_; }
  void set_lr_scale(double scale);          // every group: lr = peak_lr * scale (LR schedules)
  void set_group_lr(int group, double lr);  // one group's current lr

  // This rank's owned ranges of exp_avg / exp_avg_sq as fp32 views (ShardPlan::owned_ranges order):
  // checkpoints read them, or fill them in place and then call sync_state_replicas().
  std::vector<TensorPiece> state_pieces(AdamState which);
  // Copies the overlap of each piece with what this rank owns. Collective under no_shard and hybrid.
  void load_state_pieces(AdamState which, const std::vector<TensorPiece>& pieces);
  void sync_state_replicas();  // no_shard, hybrid: replicate owned slices after in-place fills

  int64_t state_bytes() const;
  MemoryStats memory_stats() const;  // the model's figures plus optimizer_bytes

 private:
  struct Run {  // consecutive local elements of one group
    int64_t begin = 0, numel = 0;
    int group = 0;
  };
  struct UnitState {
    at::Tensor exp_avg, exp_avg_sq;
    std::vector<Run> runs;
  };
  int group_of(const std::string& fqn) const;

  ShardedModel& model_;
  OptimizerConfig cfg_;
  double beta1_, beta2_;
  std::vector<ParamGroup> groups_;
  std::vector<UnitState> state_;  // parallel to model.trainable_shards()
  int64_t step_ = 0;
  double last_norm_ = 0.0;  // of the last clip_grad_norm since zero_grad
  double clip_to_global_norm(double total, double max_norm);
};

}  // namespace wmtp
