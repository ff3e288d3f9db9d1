// Collation: tokenized samples -> right-padded int64 batches [B, S] (docs/data.md, "Collation").
// labels = tokens with -100 on the prompt (positions < prompt_length) and on padding; labels are not
// shifted (head k at position t predicts labels[t+k+1], the loss does the shift). attention_mask is
// 1 on real tokens. S = the longest sample (cut to max_length) rounded up to a multiple of 8, or
// max_length itself. Pairwise batches pad both sides to one S so a critic can run them together.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "core/labels.h"
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace wmtp {

struct DataConfig;


struct CollateOptions {
  int64_t max_length = 2048;
  bool pad_to_max_length = false;  // false: batch max rounded up to pad_multiple
  int64_t pad_multiple = 8;
  int64_t pad_id = 0;  // token id written into padding (masked everywhere)

  // From [data] and the dataset header (pad = the tokenizer's pad id, else EOS, as weighted_mtp).
  static CollateOptions from(const DataConfig& cfg, const DatasetHeader& info);
};

struct Batch {
  at::Tensor tokens;                  // int64 [B, S]
  at::Tensor labels;                  // int64 [B, S]
  at::Tensor attention_mask;          // int64 [B, S]
  at::Tensor is_correct;              // float32 [B]
  std::vector<int64_t> sample_index;  // dataset rows
  int64_t n_label_tokens = 0;         // labels != -100 (before any head shift)
  int64_t batch_size() const { return static_cast<int64_t>(sample_index.size()); }
};

struct PairBatch {
  Batch pos, neg;  // same B and S; row i of pos and neg form pair i
};

// Throws Error(Usage) on an empty list.
Batch collate(const std::vector<TokenizedSample>& samples, const CollateOptions& opt);
PairBatch collate_pairs(const std::vector<TokenizedSample>& pos, const std::vector<TokenizedSample>& neg,
                        const CollateOptions& opt);

// How many of the items' samples keep a label once collated with `max_length` (labels are the
// positions >= prompt_length and < min(length, max_length)). Computed from the sample table alone,
// at start-up: when no sample keeps one, every loss is 0 and the run would train nothing.
struct LabelCoverage {
  int64_t samples = 0;         // pos and neg of every item
  int64_t without_labels = 0;  // prompt_length >= min(length, max_length)
  int64_t label_tokens = 0;
};
LabelCoverage label_coverage(const SampleTable& table, const std::vector<DataItem>& items, int64_t max_length);
// Throws Error(Usage) naming the dataset and [data] max_length when no sample keeps a label; returns a
// warning when some do not ("" when all do).
std::string check_label_coverage(const Dataset& ds, const std::vector<DataItem>& items, int64_t max_length);

// Reads the items' samples (one hyperslab read) and collates them; pointwise items use pos only.
Batch load_batch(const Dataset& ds, const std::vector<DataItem>& items, const CollateOptions& opt);
PairBatch load_pair_batch(const Dataset& ds, const std::vector<DataItem>& items, const CollateOptions& opt);

}  // namespace wmtp
