// Learning-rate schedule: a pure function of (config, total optimizer steps, step), so resuming
// needs only the step. constant | linear | cosine, with linear warm-up from ~0 over
// max(1, int(total * warmup_ratio)) steps (as weighted_mtp's SequentialLR(LinearLR(1e-8), ...)).
// Stepped once per optimizer step and clamped at the last step: it never runs past its end.
#pragma once
#include <cstdint>

#include "train/train_config.h"

namespace wmtp {

class LrSchedule {
 public:
  LrSchedule(const LrScheduleConfig& cfg, double peak_lr, int64_t total_steps);
  // Learning rate used by optimizer step `step` (0-based).
  double lr_at(int64_t step) const;
  double factor_at(int64_t step) const;  // lr_at / peak
  int64_t warmup_steps() const { return warmup_; }
  int64_t total_steps() const { return total_; }

 private:
  LrScheduleConfig cfg_;
  double peak_;
  int64_t total_;
  int64_t warmup_;
};

}  // namespace wmtp
