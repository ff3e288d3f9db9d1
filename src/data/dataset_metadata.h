// What a training program knows about a dataset before reading any token: the per-sample table,
// the problem index (correct / incorrect solutions per problem, with their lengths) and the facts
// recorded at preprocessing (tokenizer, template, limits). Written by preprocess-metadata, read
// by Dataset (data/dataset.h), consumed by the Sampler. The HDF5 names live in dataset_format.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace wmtp {

// One row per kept sample, in input order. Sample i's tokens are tokens[offsets[i], offsets[i+1]).
struct SampleTable {
  std::vector<int64_t> offsets;        // [n+1], offsets[0] = 0
  std::vector<int32_t> prompt_length;  // [n] BOS + prompt tokens: labels masked below this
  std::vector<int32_t> length;         // [n] total tokens (= offsets[i+1] - offsets[i])
  std::vector<uint8_t> is_correct;     // [n] 0/1
  std::vector<int32_t> difficulty;     // [n] kNoDifficulty (INT32_MIN) when absent
  std::vector<int32_t> problem;        // [n] row of ProblemIndex
  int64_t size() const { return static_cast<int64_t>(length.size()); }
  int32_t solution_length(int64_t i) const { return length[i] - prompt_length[i]; }
};

// Problems in order of first appearance in the input (as weighted_mtp's problem_index_map).
struct ProblemIndex {
  std::vector<std::string> ids;                             // [P]
  std::vector<int32_t> difficulty;                          // [P] first-seen difficulty of the problem's samples
  std::vector<int64_t> correct_offsets, incorrect_offsets;  // [P+1]
  std::vector<int64_t> correct, incorrect;                  // sample rows, ascending per problem
  std::vector<int32_t> correct_lengths, incorrect_lengths;  // solution token counts, parallel to the above
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  std::vector<int64_t> correct_of(int64_t p) const;
  std::vector<int64_t> incorrect_of(int64_t p) const;
  int64_t n_correct(int64_t p) const { return correct_offsets[p + 1] - correct_offsets[p]; }
  int64_t n_incorrect(int64_t p) const { return incorrect_offsets[p + 1] - incorrect_offsets[p]; }
};

// Fills correct/incorrect lists (and offsets, lengths) of `index`, whose ids/difficulty are set,
// from per-sample problem rows, correctness and solution lengths.
void build_problem_lists(ProblemIndex& index, const std::vector<int32_t>& problem,
                         const std::vector<uint8_t>& is_correct, const std::vector<int32_t>& solution_length);

// Root attributes of a dataset file.
struct DatasetHeader {
  std::string path;
  int64_t version = 0;
  int64_t n_samples = 0, n_tokens = 0;
  int64_t vocab_size = 0, bos_id = -1, eos_id = -1, pad_id = -1, unk_id = -1;
  std::string tokenizer_path, tokenizer_fingerprint;
  std::string prompt_template;  // "alpaca"
  bool append_eos = true;
  int64_t max_length = 0;     // 0 = no limit
  std::string on_overlength;  // "drop" | "truncate"
  std::vector<std::string> source_files;

  // v(attribute name, field) for every root attribute after format and version, the one list the
  // writer and the reader share; Self is DatasetHeader or const DatasetHeader. A bool is stored as an
  // int64 0/1, a list of strings as one newline-separated string.
  template <class Self, class V>
  static void visit_attrs(Self& s, V&& v) {
    v("n_samples", s.n_samples);
    v("n_tokens", s.n_tokens);
    v("vocab_size", s.vocab_size);
    v("bos_id", s.bos_id);
    v("eos_id", s.eos_id);
    v("pad_id", s.pad_id);
    v("unk_id", s.unk_id);
    v("tokenizer_path", s.tokenizer_path);
    v("tokenizer_fingerprint", s.tokenizer_fingerprint);
    v("template", s.prompt_template);
    v("append_eos", s.append_eos);
    v("max_length", s.max_length);
    v("on_overlength", s.on_overlength);
    v("source_files", s.source_files);
  }
};

struct DatasetMetadata {
  DatasetHeader header;
  SampleTable samples;
  ProblemIndex problems;
};

}  // namespace wmtp
