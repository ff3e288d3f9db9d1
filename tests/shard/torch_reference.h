// The independent reference optimizer of the equivalence tests: torch::optim::AdamW (param groups
// from OptimizerConfig's patterns, first match wins) and torch::nn::utils::clip_grad_norm_ over a
// LocalParams' trainable tensors, in one process. Kept in one translation unit (torch/torch.h).
#pragma once
#include <memory>

#include "model/local_params.h"
#include "shard/optimizer_config.h"

namespace wmtp::test {

class TorchAdamW {
 public:
  TorchAdamW(LocalParams& local, const OptimizerConfig& cfg);
  ~TorchAdamW();
  void zero_grad();
  // clip_grad_norm_(max_grad_norm) (no clipping when <= 0), then AdamW.step(); returns the pre-clip norm.
  double clip_and_step();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace wmtp::test
