// TorchAdamW: plain LibTorch AdamW + gradient clipping, the reference the engine must equal.
#include "torch_reference.h"

#include <torch/torch.h>

#include <limits>

#include "shard/sharded_adamw.h"

namespace wmtp::test {

struct TorchAdamW::Impl {
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> opt;
  double max_norm = 0;
};

TorchAdamW::TorchAdamW(LocalParams& local, const OptimizerConfig& c) : impl_(std::make_unique<Impl>()) {
  impl_->max_norm = c.max_grad_norm;
  std::vector<std::vector<at::Tensor>> members(c.group_patterns.size() + 1);
  for (const ParamSpec& s : local.specs()) {
    if (!s.trainable) continue;
    size_t g = 0;
    for (size_t i = 0; i < c.group_patterns.size() && g == 0; ++i)
      if (match_fqn_pattern(c.group_patterns[i], s.fqn)) g = i + 1;
    members[g].push_back(local.param(s.fqn));
    impl_->params.push_back(local.param(s.fqn));
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (size_t g = 0; g < members.size(); ++g) {
    if (members[g].empty()) continue;
    double lr = g == 0 ? c.lr : c.group_lr[g - 1];
    double wd = g == 0 ? c.weight_decay : c.group_weight_decay[g - 1];
    auto o = std::make_unique<torch::optim::AdamWOptions>(lr);
    o->betas({c.betas[0], c.betas[1]}).eps(c.eps).weight_decay(wd);
    groups.emplace_back(members[g], std::move(o));
  }
  impl_->opt = std::make_unique<torch::optim::AdamW>(std::move(groups));
}

TorchAdamW::~TorchAdamW() = default;

void TorchAdamW::zero_grad() { impl_->opt->zero_grad(); }

double TorchAdamW::clip_and_step() {
  double max = impl_->max_norm > 0 ? impl_->max_norm : std::numeric_limits<double>::infinity();
  double norm = torch::nn::utils::clip_grad_norm_(impl_->params, max);
  impl_->opt->step();
  return norm;
}

}  // namespace wmtp::test
