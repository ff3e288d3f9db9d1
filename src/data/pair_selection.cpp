// Difficulty-bin and length-balanced pair selection, step by step as weighted_mtp's
// _sample_unique_pairs / _sample_length_balanced_pairs, with sorted iteration where it used a set.
#include "data/pair_selection.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "core/error.h"
#include "data/py_random.h"
#include "data/sample_record.h"

namespace wmtp {

namespace {

// The first bin containing the problem's difficulty, or -1. Without bins every problem is in bin 0.
int bin_of(const std::vector<DifficultyBin>& bins, int32_t difficulty) {
  if (bins.empty()) return 0;
  if (difficulty == kNoDifficulty) return -1;
  for (size_t b = 0; b < bins.size(); ++b)
    if (difficulty >= bins[b].min && difficulty <= bins[b].max) return static_cast<int>(b);
  return -1;
}

int64_t cap_of(int64_t max_pairs_per_problem) { return max_pairs_per_problem > 0 ? max_pairs_per_problem : INT64_MAX; }

// Which key asked for the pairs and which file was short is the caller's to say (Sampler: n_samples
// of [data] train, val_n_samples of [data] valid).
[[noreturn]] void throw_short(int64_t wanted, int64_t got, const std::string& detail) {
  throw_usage(wanted, " pairs wanted but the dataset yields only ", got, detail,
              " (ask for fewer, raise max_pairs_per_problem or widen the bins)");
}
[[noreturn]] void throw_none(const std::string& where) {
  throw_usage("no problem has both a correct and an incorrect solution", where,
              ": not one pair (check the file's is_correct labels, or widen the bins)");
}

}  // namespace

std::vector<SelectedPair> select_difficulty_pairs(const ProblemIndex& index, const std::vector<DifficultyBin>& bins,
                                                  int64_t n_samples, int64_t max_pairs_per_problem, PyRandom& rng) {
  const size_t n_bins = bins.empty() ? 1 : bins.size();
  // 1. Problems with both kinds of solution, assigned to their first bin, in index order.
  std::vector<std::vector<int64_t>> bin_problems(n_bins);
  for (int64_t p = 0; p < index.size(); ++p) {
    if (index.n_correct(p) == 0 || index.n_incorrect(p) == 0) continue;
    int b = bin_of(bins, index.difficulty[p]);
    if (b >= 0) bin_problems[b].push_back(p);
  }
  // 2. Per bin, per problem: shuffle correct, then incorrect; pair index-wise up to the cap.
  const int64_t cap = cap_of(max_pairs_per_problem);
  std::vector<std::vector<SelectedPair>> bin_pairs(n_bins);
  for (size_t b = 0; b < n_bins; ++b) {
    for (int64_t p : bin_problems[b]) {
      std::vector<int64_t> c = index.correct_of(p), w = index.incorrect_of(p);
      rng.shuffle(c);
      rng.shuffle(w);
      const int64_t n = std::min({static_cast<int64_t>(c.size()), static_cast<int64_t>(w.size()), cap});
      for (int64_t k = 0; k < n; ++k) bin_pairs[b].push_back({c[k], w[k], static_cast<int32_t>(p)});
    }
  }
  // 3. Bins with weight > 0 and some pair; targets = floor(n * normalized weight), the remainder
  //    handed out one by one over the bins by available pairs, most first (stable).
  std::vector<size_t> active;
  double weight_sum = 0;
  for (size_t b = 0; b < n_bins; ++b) {
    const double w = bins.empty() ? 1.0 : bins[b].weight;
    if (w > 0 && !bin_pairs[b].empty()) {
      active.push_back(b);
      weight_sum += w;
    }
  }
  std::vector<int64_t> target(n_bins, 0);
  if (n_samples == 0) {
    for (size_t b : active) target[b] = static_cast<int64_t>(bin_pairs[b].size());
  } else if (!active.empty()) {
    int64_t assigned = 0;
    for (size_t b : active) {
      const double w = (bins.empty() ? 1.0 : bins[b].weight) / weight_sum;
      target[b] = static_cast<int64_t>(std::floor(static_cast<double>(n_samples) * w));
      assigned += target[b];
    }
    std::vector<size_t> by_size(active);
    std::stable_sort(by_size.begin(), by_size.end(),
                     [&](size_t a, size_t b) { return bin_pairs[a].size() > bin_pairs[b].size(); });
    for (int64_t k = 0; k < n_samples - assigned; ++k) target[by_size[static_cast<size_t>(k) % by_size.size()]]++;
  }
  // 4. Per bin: shuffle its pairs, take the target (or what there is).
  std::vector<SelectedPair> selected;
  std::ostringstream detail;
  for (size_t b : active) {
    rng.shuffle(bin_pairs[b]);
    const int64_t take = std::min<int64_t>(target[b], static_cast<int64_t>(bin_pairs[b].size()));
    selected.insert(selected.end(), bin_pairs[b].begin(), bin_pairs[b].begin() + take);
    if (!bins.empty())
      detail << (detail.tellp() ? ", " : "; per bin: ") << "[" << bins[b].min << "," << bins[b].max << "] wants "
             << target[b] << " has " << bin_pairs[b].size();
  }
  // 5. Shuffle everything; there must be n_samples.
  rng.shuffle(selected);
  const int64_t got = static_cast<int64_t>(selected.size());
  if (got == 0) throw_none(bins.empty() ? "" : " in a difficulty bin");
  if (n_samples > 0 && got < n_samples) throw_short(n_samples, got, detail.str());
  if (n_samples > 0) selected.resize(static_cast<size_t>(n_samples));
  return selected;
}

std::vector<SelectedPair> select_length_balanced_pairs(const ProblemIndex& index,
                                                       const std::vector<DifficultyBin>& bins,
                                                       const std::vector<int64_t>& length_bins, int64_t n_samples,
                                                       int64_t max_pairs_per_problem, PyRandom& rng) {
  // Label = index of the first edge the length is strictly below; past the last edge: edges.size().
  auto label = [&](int32_t len) {
    return static_cast<int64_t>(std::upper_bound(length_bins.begin(), length_bins.end(), len) - length_bins.begin());
  };
  const int64_t cap = cap_of(max_pairs_per_problem);
  std::vector<SelectedPair> all;
  for (int64_t p = 0; p < index.size(); ++p) {
    if (index.n_correct(p) == 0 || index.n_incorrect(p) == 0) continue;
    if (bin_of(bins, index.difficulty[p]) < 0) continue;
    std::map<int64_t, std::vector<int64_t>> good, bad;  // sorted labels: order independent of hashing
    for (int64_t k = index.correct_offsets[p]; k < index.correct_offsets[p + 1]; ++k)
      good[label(index.correct_lengths[k])].push_back(index.correct[k]);
    for (int64_t k = index.incorrect_offsets[p]; k < index.incorrect_offsets[p + 1]; ++k)
      bad[label(index.incorrect_lengths[k])].push_back(index.incorrect[k]);
    std::vector<SelectedPair> mine;
    for (auto& [lab, c] : good) {
      auto it = bad.find(lab);
      if (it == bad.end()) continue;
      std::vector<int64_t>& w = it->second;
      rng.shuffle(c);
      rng.shuffle(w);
      for (size_t k = 0; k < std::min(c.size(), w.size()); ++k) mine.push_back({c[k], w[k], static_cast<int32_t>(p)});
    }
    if (static_cast<int64_t>(mine.size()) > cap) {
      rng.shuffle(mine);
      mine.resize(static_cast<size_t>(cap));
    }
    all.insert(all.end(), mine.begin(), mine.end());
  }
  rng.shuffle(all);
  const int64_t got = static_cast<int64_t>(all.size());
  if (got == 0) throw_none(" in the same length bin");
  if (n_samples > 0 && got < n_samples) throw_short(n_samples, got, " of equal length bin");
  if (n_samples > 0) all.resize(static_cast<size_t>(n_samples));
  return all;
}

}  // namespace wmtp
