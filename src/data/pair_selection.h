// The two pair-selection algorithms of weighted_mtp (docs/data.md, "Sampling"), over the
// problem index, consuming one CPython-compatible random stream in weighted_mtp's order.
#pragma once
#include <cstdint>
#include <vector>

#include "data/dataset_metadata.h"

namespace wmtp {

class PyRandom;

struct SelectedPair {
  int64_t correct = -1, incorrect = -1;
  int32_t problem = -1;
};

struct DifficultyBin {
  int64_t min = 0, max = 0;  // inclusive
  double weight = 1.0;
};

// Difficulty-based unique pairs: every sample used at most once, at most `max_pairs_per_problem`
// (0 = no cap) per problem, n_samples split over bins by weight (0 = every available pair).
// `bins` empty: one bin with every problem (also those without a difficulty).
std::vector<SelectedPair> select_difficulty_pairs(const ProblemIndex& index, const std::vector<DifficultyBin>& bins,
                                                  int64_t n_samples, int64_t max_pairs_per_problem, PyRandom& rng);

// Length-balanced pairs: within each eligible problem, correct and incorrect solutions whose solution
// lengths fall in the same `length_bins` bin are paired; bins visited in ascending order.
std::vector<SelectedPair> select_length_balanced_pairs(const ProblemIndex& index,
                                                       const std::vector<DifficultyBin>& bins,
                                                       const std::vector<int64_t>& length_bins, int64_t n_samples,
                                                       int64_t max_pairs_per_problem, PyRandom& rng);

}  // namespace wmtp
