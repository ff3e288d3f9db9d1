// Internal to preprocess-metadata: one rank's share of the input, tokenized (tokenize_rank_lines),
// before the ranks merge their problem tables and write the file.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/jsonl_reader.h"

namespace wmtp {

class Progress;
class Tokenizer;
struct PreprocessOptions;

struct BadLine {
  int file = 0;
  int64_t line_in_part = 0;  // 0-based within this rank's part of the file
  std::string problem;
};

struct LocalShard {
  // Kept samples, in input order.
  std::vector<int32_t> tokens;
  std::vector<int64_t> token_ends;                                               // cumulative per sample, local
  std::vector<int32_t> prompt_length, length, difficulty, source_file, problem;  // problem: local row
  std::vector<uint8_t> is_correct;
  std::vector<int64_t> line_in_part;  // becomes source_line once the ranks' line counts are known
  std::string task_id_chars, metadata_chars;
  std::vector<int64_t> task_id_ends, metadata_ends;
  // Problems in order of first appearance on this rank.
  std::vector<std::string> problem_ids;
  std::vector<int32_t> problem_difficulty;
  std::unordered_map<std::string, int32_t> problem_rows;
  // Input accounting.
  std::vector<int64_t> lines_per_file;
  std::vector<BadLine> bad;  // the first few
  int64_t n_bad = 0, n_lines = 0;
  int64_t n_dropped_overlength = 0, n_truncated = 0, n_dropped_prompt_too_long = 0, n_prompt_not_prefix = 0;
  int64_t n_dropped_untokenized = 0;  // of the dropped ones: too long to fit, known from their bytes

  int64_t size() const { return static_cast<int64_t>(length.size()); }
};

// `progress` (optional) is told how many bytes of `range` are done.
LocalShard tokenize_rank_lines(const std::vector<InputFile>& files, ByteRange range, const Tokenizer& tok,
                               const PreprocessOptions& opt, Progress* progress = nullptr);

}  // namespace wmtp
