// Names inside a wmtp dataset file (one HDF5 file per split, written by preprocess-metadata).
// docs/data.md is the human-readable spec; bump kDatasetVersion on any incompatible change.
//
//   /                      attrs: format, version, n_samples, n_tokens, vocab_size, bos_id, eos_id, pad_id,
//                                 unk_id, tokenizer_path, tokenizer_fingerprint, template, append_eos,
//                                 max_length, on_overlength, source_files (newline-separated)
//   /tokens                int32 [n_tokens]   every sample's ids, concatenated
//   /samples/offsets       int64 [n+1]        sample i = tokens[offsets[i], offsets[i+1])
//   /samples/{prompt_length,length,difficulty,problem,source_file} int32 [n]; is_correct uint8 [n];
//   /samples/source_line   int64 [n]          1-based line in input file source_file
//   /samples/task_id, /samples/metadata_json  string columns (below)
//   /problems/id           string column [P]; /problems/difficulty int32 [P]
//   /problems/{correct,incorrect}_offsets int64 [P+1]; {correct,incorrect} int64; *_lengths int32
//   /stats                 attrs: every DatasetStats count, length summaries, difficulty histogram
// A "string column" NAME is NAME (uint8 bytes, UTF-8, concatenated) + NAME_offsets (int64 [n+1]).
#pragma once

namespace wmtp::dsformat {

constexpr const char* kFormat = "wmtp-dataset";
constexpr int kVersion = 1;

constexpr const char* kTokens = "tokens";
constexpr const char* kSamples = "samples";
constexpr const char* kProblems = "problems";
constexpr const char* kStats = "stats";

}  // namespace wmtp::dsformat
