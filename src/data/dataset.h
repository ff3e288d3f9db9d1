// Dataset: read access to one preprocessed split (HDF5 written by preprocess-metadata). open() reads
// only the metadata (sample table, problem index, header): enough for the Sampler to plan. Tokens
// are then read per request, by a hyperslab selection covering just the requested samples' ranges
// — never the whole token array. Every rank opens the file independently (serial HDF5, read-only).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/h5.h"
#include "data/dataset_metadata.h"
#include "data/dataset_stats.h"

namespace wmtp {

struct TokenizedSample {
  int64_t index = -1;           // row in the dataset
  std::vector<int32_t> tokens;  // BOS ... [EOS]
  int32_t prompt_length = 0;    // labels are masked below this position
  bool is_correct = false;
};

class Dataset {
 public:
  // Throws Error(Input) naming the file when it is missing, not a wmtp dataset, of a newer version,
  // or inconsistent (offsets, lengths, problem rows).
  static Dataset open(const std::string& path);

  const std::string& path() const { return meta_.header.path; }
  const DatasetHeader& header() const { return meta_.header; }
  const DatasetMetadata& metadata() const { return meta_; }
  const SampleTable& samples() const { return meta_.samples; }
  const ProblemIndex& problems() const { return meta_.problems; }
  int64_t size() const { return meta_.samples.size(); }

  // The samples in the order asked (repeats allowed). One HDF5 read for the union of their ranges.
  std::vector<TokenizedSample> read(const std::vector<int64_t>& indices) const;
  TokenizedSample read_one(int64_t index) const { return std::move(read({index}).front()); }
  // Per-sample strings, read on demand.
  std::string task_id(int64_t index) const;
  std::string metadata_json(int64_t index) const;  // simple metadata kept at preprocessing, JSON object
  // The statistics stored by preprocess-metadata.
  DatasetStats stats() const;

  // Token ids read from the file so far by this object (tests check that reads stay partial).
  int64_t tokens_read() const { return tokens_read_; }

 private:
  Dataset() = default;
  std::string read_string_row(const std::string& column, int64_t index) const;
  void check_index(int64_t index) const;
  H5Handle file_, tokens_;
  DatasetMetadata meta_;
  mutable int64_t tokens_read_ = 0;
};

// Validation data must be read by the model trained on `train`: ids within its vocabulary
// (`model_vocab`), made by the same tokenizer (fingerprints). Throws Error(Usage) naming both files.
void check_validation_dataset(const Dataset& train, const Dataset& valid, int64_t model_vocab);

}  // namespace wmtp
