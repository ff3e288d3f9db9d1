// Problem index construction from per-sample rows.
#include "data/dataset_metadata.h"

#include "core/error.h"

namespace wmtp {

std::vector<int64_t> ProblemIndex::correct_of(int64_t p) const {
  return {correct.begin() + correct_offsets[p], correct.begin() + correct_offsets[p + 1]};
}
std::vector<int64_t> ProblemIndex::incorrect_of(int64_t p) const {
  return {incorrect.begin() + incorrect_offsets[p], incorrect.begin() + incorrect_offsets[p + 1]};
}

void build_problem_lists(ProblemIndex& index, const std::vector<int32_t>& problem,
                         const std::vector<uint8_t>& is_correct, const std::vector<int32_t>& solution_length) {
  const int64_t P = index.size();
  const int64_t n = static_cast<int64_t>(problem.size());
  WMTP_CHECK(is_correct.size() == problem.size() && solution_length.size() == problem.size(),
             "per-sample columns differ in length");
  // Counting sort by problem keeps each problem's samples in ascending (input) order.
  index.correct_offsets.assign(P + 1, 0);
  index.incorrect_offsets.assign(P + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    WMTP_CHECK(problem[i] >= 0 && problem[i] < P, "sample ", i, " has problem row ", problem[i], " of ", P);
    (is_correct[i] ? index.correct_offsets : index.incorrect_offsets)[problem[i] + 1]++;
  }
  for (int64_t p = 0; p < P; ++p) {
    index.correct_offsets[p + 1] += index.correct_offsets[p];
    index.incorrect_offsets[p + 1] += index.incorrect_offsets[p];
  }
  index.correct.assign(index.correct_offsets[P], 0);
  index.incorrect.assign(index.incorrect_offsets[P], 0);
  index.correct_lengths.assign(index.correct_offsets[P], 0);
  index.incorrect_lengths.assign(index.incorrect_offsets[P], 0);
  std::vector<int64_t> c_next(index.correct_offsets.begin(), index.correct_offsets.end() - 1);
  std::vector<int64_t> i_next(index.incorrect_offsets.begin(), index.incorrect_offsets.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    if (is_correct[i]) {
      int64_t at = c_next[problem[i]]++;
      index.correct[at] = i;
      index.correct_lengths[at] = solution_length[i];
    } else {
      int64_t at = i_next[problem[i]]++;
      index.incorrect[at] = i;
      index.incorrect_lengths[at] = solution_length[i];
    }
  }
}

}  // namespace wmtp
