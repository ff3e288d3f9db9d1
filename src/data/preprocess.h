// preprocess-metadata as a library call: JSONL samples -> one HDF5 dataset file (format in
// data/dataset_format.h). Collective over `comm`: ranks tokenize disjoint line ranges, agree on
// bad input before anything is written, merge the problem table on rank 0, then write the file
// with parallel HDF5 (each rank its own rows of tokens and per-sample columns) under <output>.tmp,
// committed by fsync + rename. Bad input throws an agreed Error(Input) naming file:line.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"
#include "data/dataset_stats.h"

namespace wmtp {

struct PreprocessOptions {
  std::vector<std::string> inputs;     // JSONL files of one split, concatenated in this order
  std::string tokenizer;               // SentencePiece .model
  std::string output;                  // .h5 path
  int64_t max_length = 2048;           // tokens per sample incl. BOS/EOS; 0 = no limit
  std::string on_overlength = "drop";  // "drop" | "truncate"
  bool append_eos = true;
  bool skip_bad_lines = false;
  int64_t report_bad_lines = 5;  // how many bad lines are named in messages

  void validate() const;  // throws Error(Usage)
};

struct PreprocessResult {
  DatasetStats stats;
  double seconds = 0;
};

PreprocessResult preprocess_dataset(MPI_Comm comm, const PreprocessOptions& opt, const Logger& log);

}  // namespace wmtp
