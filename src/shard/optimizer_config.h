// OptimizerConfig: the [optimizer] TOML table — AdamW hyper-parameters, gradient clipping and
// parameter groups chosen by FQN pattern (docs/sharding.md). Defaults live here (weighted_mtp's AdamW,
// docs/parity.md: betas (0.9, 0.95), eps 1e-8, weight decay 0.01, clip 1.0).
#pragma once
#include <string>
#include <vector>

namespace wmtp {

enum class OptimizerKind { AdamW };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::AdamW;
  double lr = 1e-5;
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;  // <= 0: no clipping (the norm is still computed and logged)
  // Groups: parameter i goes to the first pattern its FQN matches ('*' any run of characters, '?'
  // one character); unmatched parameters use lr / weight_decay above. One lr and one weight decay
  // per pattern.
  std::vector<std::string> group_patterns;
  std::vector<double> group_lr;
  std::vector<double> group_weight_decay;

  template <class V>
  void visit(V& v) {
    v.choice("kind", kind, {"adamw"}, "optimizer");
    v.field("lr", lr, "peak learning rate of the default group");
    v.field("betas", betas, "AdamW (beta1, beta2)");
    v.field("eps", eps, "AdamW epsilon");
    v.field("weight_decay", weight_decay, "decoupled weight decay of the default group");
    v.field("max_grad_norm", max_grad_norm, "global gradient-norm clip (<= 0: off)");
    v.field("group_patterns", group_patterns, "FQN glob per extra parameter group, e.g. \"value_head.*\"");
    v.field("group_lr", group_lr, "peak learning rate per group pattern");
    v.field("group_weight_decay", group_weight_decay, "weight decay per group pattern");
  }
  void validate() const;  // throws Error(Usage) naming the key (optimizer_config.cpp)
};

}  // namespace wmtp
