// Names inside a wmtp dataset file (one HDF5 file per split, written by preprocess-metadata and
// read by Dataset): the writer and the reader both take every name from here (the root attributes
// from DatasetHeader::visit_attrs, the /stats attributes from DatasetStats). docs/data.md is the
// human-readable spec; bump kVersion on any incompatible change.
//
//   /                      attrs: format, version, n_samples, n_tokens, vocab_size, bos_id, eos_id, pad_id,
//                                 unk_id, tokenizer_path, tokenizer_fingerprint, template, append_eos,
//                                 max_length, on_overlength, source_files (newline-separated), created_by
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

constexpr const char* kFormat = "wmtp-dataset";  // the value of the root attribute kFormatAttr
constexpr int kVersion = 1;

constexpr const char* kFormatAttr = "format";
constexpr const char* kVersionAttr = "version";
constexpr const char* kCreatedByAttr = "created_by";

constexpr const char* kTokens = "tokens";
constexpr const char* kSamples = "samples";
constexpr const char* kProblems = "problems";
constexpr const char* kStats = "stats";

constexpr const char* kOffsetsSuffix = "_offsets";  // a string column's row offsets

namespace sample {  // columns of /samples
constexpr const char* kOffsets = "offsets";
constexpr const char* kPromptLength = "prompt_length";
constexpr const char* kLength = "length";
constexpr const char* kIsCorrect = "is_correct";
constexpr const char* kDifficulty = "difficulty";
constexpr const char* kProblem = "problem";
constexpr const char* kSourceFile = "source_file";
constexpr const char* kSourceLine = "source_line";
constexpr const char* kTaskId = "task_id";                                   // string column
constexpr const char* kMetadataJson = "metadata_json";                       // string column
constexpr const char* kDifficultyMissingValue = "difficulty_missing_value";  // attribute of /samples
}  // namespace sample

namespace problem {                // columns of /problems
constexpr const char* kId = "id";  // string column
constexpr const char* kDifficulty = "difficulty";
constexpr const char* kCorrectOffsets = "correct_offsets";
constexpr const char* kIncorrectOffsets = "incorrect_offsets";
constexpr const char* kCorrect = "correct";
constexpr const char* kIncorrect = "incorrect";
constexpr const char* kCorrectLengths = "correct_lengths";
constexpr const char* kIncorrectLengths = "incorrect_lengths";
}  // namespace problem

}  // namespace wmtp::dsformat
