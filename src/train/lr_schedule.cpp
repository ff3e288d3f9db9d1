// LrSchedule: warm-up then constant / linear / cosine decay to min_lr_ratio.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace wmtp {

LrSchedule::LrSchedule(const LrScheduleConfig& cfg, double peak_lr, int64_t total_steps)
    : cfg_(cfg), peak_(peak_lr), total_(std::max<int64_t>(1, total_steps)) {
  if (cfg.warmup_ratio < 0 || cfg.warmup_ratio > 1)
    throw_usage("lr_schedule.warmup_ratio = ", cfg.warmup_ratio, " must be in [0, 1]");
  if (cfg.min_lr_ratio < 0 || cfg.min_lr_ratio > 1)
    throw_usage("lr_schedule.min_lr_ratio = ", cfg.min_lr_ratio, " must be in [0, 1]");
  warmup_ = cfg.type == LrScheduleType::Constant ? 0 : std::max<int64_t>(1, int64_t(double(total_) * cfg.warmup_ratio));
  if (cfg.warmup_ratio == 0) warmup_ = 0;
}

double LrSchedule::factor_at(int64_t step) const {
  step = std::clamp<int64_t>(step, 0, total_ - 1);
  if (cfg_.type == LrScheduleType::Constant) return 1.0;
  if (step < warmup_) {
    const double start = 1e-8;
    return start + (1.0 - start) * double(step) / double(warmup_);
  }
  const int64_t span = std::max<int64_t>(1, total_ - warmup_);
  const double t = std::min(1.0, double(step - warmup_) / double(span));
  const double lo = cfg_.min_lr_ratio;
  if (cfg_.type == LrScheduleType::Linear) return 1.0 - (1.0 - lo) * t;
  return lo + (1.0 - lo) * 0.5 * (1.0 + std::cos(M_PI * t));  // cosine
}

double LrSchedule::lr_at(int64_t step) const { return peak_ * factor_at(step); }

}  // namespace wmtp
