// Validation of the [data] table.
#include "data/data_config.h"

#include <cstdint>

#include "core/error.h"

namespace wmtp {

void DataConfig::validate() const {
  if (max_length < 1) throw_usage("[data] max_length must be >= 1, got ", max_length);
  if (seed < 0) throw_usage("[data] seed must be >= 0, got ", seed);
  if (n_samples < 0) throw_usage("[data] n_samples must be >= 0 (0 = all), got ", n_samples);
  if (val_n_samples < 0) throw_usage("[data] val_n_samples must be >= 0 (0 = all), got ", val_n_samples);
  if (max_pairs_per_problem < 0) throw_usage("[data] max_pairs_per_problem must be >= 0 (0 = no cap)");
  if (difficulty_bins.size() % 2 != 0)
    throw_usage("[data] difficulty_bins must hold [min, max] pairs (an even count), got ", difficulty_bins.size(),
                " numbers");
  for (size_t b = 0; b < difficulty_bins.size(); b += 2) {
    if (difficulty_bins[b] > difficulty_bins[b + 1])
      throw_usage("[data] difficulty_bins: bin ", b / 2, " has min ", difficulty_bins[b], " > max ",
                  difficulty_bins[b + 1]);
    if (difficulty_bins[b] <= INT32_MIN || difficulty_bins[b + 1] > INT32_MAX)
      throw_usage("[data] difficulty_bins: bin ", b / 2, " is outside the int32 range");
  }
  const size_t n_bins = difficulty_bins.empty() ? 1 : difficulty_bins.size() / 2;
  if (!difficulty_weights.empty()) {
    if (difficulty_weights.size() != n_bins)
      throw_usage("[data] difficulty_weights has ", difficulty_weights.size(), " values for ", n_bins, " bin(s)");
    bool any = false;
    for (double w : difficulty_weights) {
      if (!(w >= 0)) throw_usage("[data] difficulty_weights must be >= 0, got ", w);
      any = any || w > 0;
    }
    if (!any) throw_usage("[data] difficulty_weights: at least one weight must be > 0");
  }
  if (length_bins.empty()) throw_usage("[data] length_bins must not be empty");
  for (size_t i = 1; i < length_bins.size(); ++i)
    if (length_bins[i] <= length_bins[i - 1])
      throw_usage("[data] length_bins must increase strictly (", length_bins[i - 1], " then ", length_bins[i], ")");
}

}  // namespace wmtp
