// DataConfig: the [data] table of a training config — dataset paths, sequence length, padding and
// the sampling keys (weighted_mtp's data_sampling; docs/data.md). Defaults live here only.
// Batch sizes are not here: global_batch_size and micro_batch_size belong to [training] and reach
// the data layer as a BatchGeometry (data/sampler.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace wmtp {

enum class PadTo { MultipleOf8, MaxLength };         // [data] pad_to
enum class Sampling { Difficulty, LengthBalanced };  // [data] sampling

struct DataConfig {
  std::string train;                  // HDF5 from preprocess-metadata (required by the trainers)
  std::string valid;                  // empty: no validation
  int64_t max_length = 2048;          // longest sequence fed to the model; longer samples are cut from the right
  PadTo pad_to = PadTo::MultipleOf8;  // multiple_of_8: batch max rounded up to 8; max_length: always max_length
  int64_t seed = 42;  // sampling seed (the selection and each epoch's shuffle); independent of world size
  Sampling sampling = Sampling::Difficulty;  // difficulty: unique pairs by difficulty bin; length_balanced
  bool pairwise = false;                 // batches of (correct, incorrect) pairs; else the correct sample of each pair
  int64_t n_samples = 0;                 // items drawn for training; 0 = every available pair
  int64_t val_n_samples = 500;           // items drawn from the validation split; 0 = all
  int64_t max_pairs_per_problem = 0;     // 0 = no cap
  std::vector<int64_t> difficulty_bins;  // inclusive [min, max] pairs, flattened; empty = one bin, every problem
  std::vector<double> difficulty_weights;                                       // one per bin; empty = equal
  std::vector<int64_t> length_bins = {0, 100, 150, 200, 300, 500, 1000, 2000};  // solution-length edges

  template <class V>
  void visit(V& v) {
    v.field("train", train, "training split: HDF5 dataset written by preprocess-metadata");
    v.field("valid", valid, "validation split (empty = no validation)");
    v.field("max_length", max_length, "longest sequence in tokens; longer samples are truncated from the right");
    v.choice("pad_to", pad_to, {"multiple_of_8", "max_length"},
             "pad each batch to its longest sample rounded up to 8, or always to max_length");
    v.field("seed", seed, "sampling seed (pair selection and per-epoch shuffle; world-size independent)");
    v.choice("sampling", sampling, {"difficulty", "length_balanced"},
             "pair selection: unique pairs per difficulty bin, or pairs matched by solution length");
    v.field("pairwise", pairwise, "yield (correct, incorrect) pairs instead of the correct sample of each pair");
    v.field("n_samples", n_samples, "training items to draw (0 = every available pair)");
    v.field("val_n_samples", val_n_samples, "validation items to draw (0 = all)");
    v.field("max_pairs_per_problem", max_pairs_per_problem, "cap on pairs drawn from one problem (0 = none)");
    v.field("difficulty_bins", difficulty_bins,
            "inclusive [min, max] difficulty ranges, flattened: [1, 5, 6, 25] (empty = every problem)");
    v.field("difficulty_weights", difficulty_weights, "share of n_samples per difficulty bin (empty = equal)");
    v.field("length_bins", length_bins, "solution-length bin edges for length_balanced sampling");
  }

  // Throws Error(Usage) naming the bad key.
  void validate() const;
};

}  // namespace wmtp
