// The verifiable tests' independent computation (double precision, one sequence at a time, written
// from the spec in docs/verifiable.md without the library's code): the GAE reverse scan, the
// whitened clamped exponential weight, the EMA recursion.
#pragma once
#include <cstdint>
#include <vector>

#include "pipelines/losses/verifiable.h"

namespace wmtp::test {

// Advantages of one sequence (0 outside labels != -100): deltas v_t - v_{t-1} (v_{-1} = v_init) up
// to the last solution token T, then A_t = delta_t + lambda A_{t+1} from T down to 0; lambda = 1:
// A_t = 1 - v_t on solution tokens.
std::vector<double> reference_gae(const std::vector<double>& values, const std::vector<int64_t>& labels, double lambda,
                                  double v_init);

// clamp(exp(((a - mean) / (sd + 1e-8)) / beta), clip_min, clip_max)
double reference_weight(double adv, double mean, double sd, const TdWeightConfig& c);
// exp(((a - mean) / (sd + 1e-8)) / beta) lies outside [clip_min, clip_max]
bool reference_clipped(double adv, double mean, double sd, const TdWeightConfig& c);

// The EMA of docs/verifiable.md from one step's valid advantages (all ranks' micro-batches together).
struct ReferenceEma {
  double mean = 0, sd = 1;
  int64_t steps = 0;
  void update(const std::vector<double>& valid, double momentum, int64_t warmup);
};

// Mean and unbiased std.
void mean_and_std(const std::vector<double>& x, double* mean, double* sd);

}  // namespace wmtp::test
