// Range checks of [optimizer] (ConfigSet has already refused non-finite numbers).
#include "shard/optimizer_config.h"

#include <cfloat>
#include <string>

#include "core/error.h"

namespace wmtp {

void OptimizerConfig::validate() const {
  if (betas.size() != 2) throw_usage("[optimizer] betas: expected two values, got ", betas.size());
  if (!(betas[0] >= 0 && betas[0] < 1 && betas[1] >= 0 && betas[1] < 1))
    throw_usage("[optimizer] betas: each must lie in [0, 1), got [", betas[0], ", ", betas[1], "]");
  if (!(lr >= 0)) throw_usage("[optimizer] lr: must be >= 0, got ", lr);
  if (!(eps > 0)) throw_usage("[optimizer] eps: must be > 0, got ", eps);
  if (!(weight_decay >= 0)) throw_usage("[optimizer] weight_decay: must be >= 0, got ", weight_decay);
  if (max_grad_norm != max_grad_norm) throw_usage("[optimizer] max_grad_norm: must be a number (<= 0: no clipping)");
  if (group_lr.size() != group_patterns.size() || group_weight_decay.size() != group_patterns.size())
    throw_usage("[optimizer] group_patterns, group_lr and group_weight_decay must have the same length (got ",
                group_patterns.size(), ", ", group_lr.size(), ", ", group_weight_decay.size(), ")");
  for (size_t i = 0; i < group_patterns.size(); ++i)
    if (!(group_lr[i] >= 0) || !(group_weight_decay[i] >= 0))
      throw_usage("[optimizer] group '", group_patterns[i], "': lr and weight decay must be >= 0");
  // The update multiplies fp32 masters by 1 - lr * wd and adds lr / (1 - beta1) times at most ~1:
  // factors that do not fit in fp32 stop LibTorch mid-step instead of training.
  auto fits = [&](const std::string& what, double lr_, double wd) {
    if (lr_ / (1 - betas[0]) > FLT_MAX || lr_ * wd > FLT_MAX)
      throw_usage("[optimizer] ", what, " = ", lr_, ": the AdamW step (lr / (1 - beta1) = ", lr_ / (1 - betas[0]),
                  ", lr * weight_decay = ", lr_ * wd, ") does not fit in fp32 (max ", FLT_MAX, ")");
  };
  fits("lr", lr, weight_decay);
  for (size_t i = 0; i < group_patterns.size(); ++i)
    fits("group_lr[" + std::to_string(i) + "]", group_lr[i], group_weight_decay[i]);
}

}  // namespace wmtp
