// Right-padded batches with prompt/padding label masking.
#include "data/collate.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "data/data_config.h"

namespace wmtp {

CollateOptions CollateOptions::from(const DataConfig& cfg, const DatasetHeader& info) {
  CollateOptions o;
  o.max_length = cfg.max_length;
  o.pad_to_max_length = cfg.pad_to == PadTo::MaxLength;
  o.pad_id = info.pad_id >= 0 ? info.pad_id : info.eos_id;
  return o;
}

LabelCoverage label_coverage(const SampleTable& table, const std::vector<DataItem>& items, int64_t max_length) {
  LabelCoverage c;
  auto add = [&](int64_t row) {
    const int64_t kept = std::min<int64_t>(table.length[size_t(row)], max_length) - table.prompt_length[size_t(row)];
    ++c.samples;
    if (kept <= 0) ++c.without_labels;
    else
      c.label_tokens += kept;
  };
  for (const DataItem& it : items) {
    add(it.pos);
    if (it.neg >= 0) add(it.neg);
  }
  return c;
}

std::string check_label_coverage(const Dataset& ds, const std::vector<DataItem>& items, int64_t max_length) {
  const LabelCoverage c = label_coverage(ds.samples(), items, max_length);
  if (c.samples > 0 && c.without_labels == c.samples)
    throw_usage("[data] max_length = ", max_length, ": each of the ", c.samples, " samples selected from ", ds.path(),
                " has a prompt at least that long, so no token is left to learn (raise max_length)");
  if (c.without_labels == 0) return "";
  return detail::concat("[data] max_length = ", max_length, " leaves ", c.without_labels, " of the ", c.samples,
                        " samples selected from ", ds.path(), " without a label (the prompt fills it)");
}

namespace {

int64_t padded_length(int64_t longest, const CollateOptions& opt) {
  if (opt.max_length < 1) throw_usage("collate: max_length must be >= 1");
  if (opt.pad_to_max_length) return opt.max_length;
  const int64_t m = std::max<int64_t>(1, opt.pad_multiple);
  return std::min(opt.max_length, (std::max<int64_t>(longest, 1) + m - 1) / m * m);
}

Batch collate_to(const std::vector<TokenizedSample>& samples, int64_t S, const CollateOptions& opt) {
  const int64_t B = static_cast<int64_t>(samples.size());
  at::Tensor tokens = at::full({B, S}, opt.pad_id, at::kLong);
  at::Tensor labels = at::full({B, S}, kIgnoreIndex, at::kLong);
  at::Tensor mask = at::zeros({B, S}, at::kLong);
  at::Tensor correct = at::zeros({B}, at::kFloat);
  auto t = tokens.accessor<int64_t, 2>();
  auto l = labels.accessor<int64_t, 2>();
  auto m = mask.accessor<int64_t, 2>();
  auto c = correct.accessor<float, 1>();
  Batch b;
  for (int64_t i = 0; i < B; ++i) {
    const TokenizedSample& s = samples[i];
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()), S);  // right truncation
    for (int64_t j = 0; j < n; ++j) {
      t[i][j] = s.tokens[j];
      m[i][j] = 1;
      if (j >= s.prompt_length) {
        l[i][j] = s.tokens[j];
        ++b.n_label_tokens;
      }
    }
    c[i] = s.is_correct ? 1.0f : 0.0f;
    b.sample_index.push_back(s.index);
  }
  b.tokens = tokens;
  b.labels = labels;
  b.attention_mask = mask;
  b.is_correct = correct;
  return b;
}

int64_t longest(const std::vector<TokenizedSample>& v) {
  int64_t n = 0;
  for (const auto& s : v) n = std::max<int64_t>(n, static_cast<int64_t>(s.tokens.size()));
  return n;
}

}  // namespace

Batch collate(const std::vector<TokenizedSample>& samples, const CollateOptions& opt) {
  if (samples.empty()) throw_usage("collate: empty batch");
  return collate_to(samples, padded_length(longest(samples), opt), opt);
}

PairBatch collate_pairs(const std::vector<TokenizedSample>& pos, const std::vector<TokenizedSample>& neg,
                        const CollateOptions& opt) {
  if (pos.empty() || pos.size() != neg.size())
    throw_usage("collate_pairs: need as many negatives as positives (", pos.size(), " vs ", neg.size(), "), > 0");
  const int64_t S = padded_length(std::max(longest(pos), longest(neg)), opt);
  return {collate_to(pos, S, opt), collate_to(neg, S, opt)};
}

Batch load_batch(const Dataset& ds, const std::vector<DataItem>& items, const CollateOptions& opt) {
  std::vector<int64_t> rows;
  for (const auto& it : items) rows.push_back(it.pos);
  return collate(ds.read(rows), opt);
}

PairBatch load_pair_batch(const Dataset& ds, const std::vector<DataItem>& items, const CollateOptions& opt) {
  std::vector<int64_t> rows;
  for (const auto& it : items) {
    if (it.neg < 0) throw_usage("load_pair_batch: item of sample ", it.pos, " has no negative (sampler not pairwise?)");
    rows.push_back(it.pos);
  }
  for (const auto& it : items) rows.push_back(it.neg);
  std::vector<TokenizedSample> all = ds.read(rows);  // one read for both sides
  const auto half = all.begin() + static_cast<std::ptrdiff_t>(items.size());
  return collate_pairs({all.begin(), half}, {half, all.end()}, opt);
}

}  // namespace wmtp
