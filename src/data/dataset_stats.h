// Statistics of a preprocessed dataset: counts (lines, samples, problems, pairs, drops), the
// difficulty histogram and length percentiles. preprocess-metadata prints them and stores them as
// attributes of /stats; visit() names every field once for both.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace wmtp {

struct DatasetMetadata;

struct LengthSummary {
  int64_t min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  double mean = 0;

  // v(name, field) for every field (int64_t, then the double mean); Self may be const.
  template <class Self, class V>
  static void visit(Self& s, V&& v) {
    v("min", s.min);
    v("p50", s.p50);
    v("p90", s.p90);
    v("p99", s.p99);
    v("max", s.max);
    v("mean", s.mean);
  }
};
// Nearest-rank percentiles (p-th = sorted[ceil(p/100*n) - 1]); all zero for an empty input.
LengthSummary summarize_lengths(std::vector<int32_t> values);

struct DatasetStats {
  // Input and filtering (set by preprocess-metadata).
  int64_t n_lines = 0;                    // lines read
  int64_t n_bad_lines = 0;                // skipped with --skip-bad-lines
  int64_t n_dropped_overlength = 0;       // longer than max_length, --on-overlength drop
  int64_t n_truncated = 0;                // cut to max_length, --on-overlength truncate
  int64_t n_dropped_prompt_too_long = 0;  // truncation would leave no solution token
  int64_t n_prompt_not_prefix = 0;        // BPE merged across the prompt/solution boundary
  int64_t n_difficulty_conflicts = 0;     // samples whose difficulty differs from their problem's
  // Content (computed from the kept samples by compute_content_stats).
  int64_t n_samples = 0, n_correct = 0, n_incorrect = 0, n_tokens = 0;
  int64_t n_problems = 0, n_valid_problems = 0;  // valid: >= 1 correct and >= 1 incorrect
  int64_t total_possible_pairs = 0;              // sum over problems of min(#correct, #incorrect)
  int64_t n_no_difficulty = 0;
  LengthSummary length, prompt_length, solution_length;
  std::vector<int64_t> difficulty_values, difficulty_counts;  // histogram over samples with one

  // v(name, field) for every count; Self is DatasetStats or const DatasetStats.
  template <class Self, class V>
  static void visit_counts(Self& s, V&& v) {
    v("n_lines", s.n_lines);
    v("n_bad_lines", s.n_bad_lines);
    v("n_dropped_overlength", s.n_dropped_overlength);
    v("n_truncated", s.n_truncated);
    v("n_dropped_prompt_too_long", s.n_dropped_prompt_too_long);
    v("n_prompt_not_prefix", s.n_prompt_not_prefix);
    v("n_difficulty_conflicts", s.n_difficulty_conflicts);
    v("n_samples", s.n_samples);
    v("n_correct", s.n_correct);
    v("n_incorrect", s.n_incorrect);
    v("n_tokens", s.n_tokens);
    v("n_problems", s.n_problems);
    v("n_valid_problems", s.n_valid_problems);
    v("total_possible_pairs", s.total_possible_pairs);
    v("n_no_difficulty", s.n_no_difficulty);
  }
  // v(name, summary) for every length summary.
  template <class Self, class V>
  static void visit_lengths(Self& s, V&& v) {
    v("length", s.length);
    v("prompt_length", s.prompt_length);
    v("solution_length", s.solution_length);
  }
  // The difficulty histogram's two parallel lists.
  static constexpr const char* kDifficultyValues = "difficulty_values";
  static constexpr const char* kDifficultyCounts = "difficulty_counts";

  std::string to_json() const;  // every field (for broadcasting and tests)
  static DatasetStats from_json(const std::string& text);
  std::string describe() const;  // multi-line human summary
};

// Fills the content fields from the kept samples and their problem index.
void compute_content_stats(DatasetStats& stats, const DatasetMetadata& meta);

}  // namespace wmtp
