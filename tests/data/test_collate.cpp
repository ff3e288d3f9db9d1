// Collation: exact tokens / labels / masks for hand-made samples, padding rules, truncation, pairs.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/error.h"
#include "data/collate.h"
#include "data/data_config.h"

namespace wmtp {
namespace {

TokenizedSample sample(int64_t index, std::vector<int32_t> tokens, int32_t prompt, bool ok = true) {
  TokenizedSample s;
  s.index = index;
  s.tokens = std::move(tokens);
  s.prompt_length = prompt;
  s.is_correct = ok;
  return s;
}

std::vector<int64_t> row(const at::Tensor& t, int64_t i) {
  at::Tensor r = t[i].contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

TEST(Collate, RightPadsAndMasksPromptAndPadding) {
  CollateOptions o;
  o.max_length = 64;
  o.pad_id = 2;
  Batch b = collate({sample(7, {1, 10, 11, 12, 13, 2}, 3), sample(9, {1, 20, 21, 22, 23, 24, 25, 26, 27, 2}, 2, false)},
                    o);
  ASSERT_EQ(b.tokens.sizes(), (at::IntArrayRef{2, 16}));  // longest 10 -> multiple of 8
  EXPECT_EQ(b.tokens.scalar_type(), at::kLong);
  EXPECT_EQ(b.labels.scalar_type(), at::kLong);
  EXPECT_EQ(row(b.tokens, 0), (std::vector<int64_t>{1, 10, 11, 12, 13, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(row(b.labels, 0), (std::vector<int64_t>{-100, -100, -100, 12, 13, 2, -100, -100, -100, -100, -100, -100,
                                                    -100, -100, -100, -100}));
  EXPECT_EQ(row(b.attention_mask, 0), (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row(b.labels, 1),
            (std::vector<int64_t>{-100, -100, 21, 22, 23, 24, 25, 26, 27, 2, -100, -100, -100, -100, -100, -100}));
  EXPECT_EQ(b.sample_index, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(b.n_label_tokens, 3 + 8);
  EXPECT_EQ(b.n_label_tokens, (b.labels != kIgnoreIndex).sum().item<int64_t>());
  EXPECT_FLOAT_EQ(b.is_correct[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(b.is_correct[1].item<float>(), 0.0f);
}

TEST(Collate, PaddingModesAndTruncation) {
  CollateOptions o;
  o.max_length = 12;
  o.pad_id = 0;
  std::vector<TokenizedSample> v{sample(0, {1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}, 4),
                                 sample(1, {1, 5}, 1)};
  Batch cut = collate(v, o);
  ASSERT_EQ(cut.tokens.size(1), 12);  // 15 rounds to 16 but max_length wins; cut from the right
  EXPECT_EQ(row(cut.tokens, 0), (std::vector<int64_t>{1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(row(cut.labels, 0), (std::vector<int64_t>{-100, -100, -100, -100, 8, 9, 10, 11, 12, 13, 14, 15}));
  o.pad_to_max_length = true;
  o.max_length = 20;
  EXPECT_EQ(collate({v[1]}, o).tokens.size(1), 20);
  o.pad_to_max_length = false;
  EXPECT_EQ(collate({v[1]}, o).tokens.size(1), 8);
  EXPECT_THROW(collate({}, o), Error);
  // A prompt longer than the cut leaves no label at all (and nothing breaks).
  o.max_length = 3;
  Batch none = collate({v[0]}, o);
  EXPECT_EQ(none.n_label_tokens, 0);
}

TEST(Collate, PairsShareOneLength) {
  CollateOptions o;
  o.max_length = 100;
  PairBatch p = collate_pairs({sample(1, {1, 2, 3}, 1)}, {sample(2, std::vector<int32_t>(19, 4), 2, false)}, o);
  EXPECT_EQ(p.pos.tokens.sizes(), p.neg.tokens.sizes());
  EXPECT_EQ(p.pos.tokens.size(1), 24);
  EXPECT_EQ(p.pos.n_label_tokens, 2);
  EXPECT_EQ(p.neg.n_label_tokens, 17);
  EXPECT_THROW(collate_pairs({sample(1, {1}, 1)}, {}, o), Error);
}

TEST(Collate, OptionsFromConfig) {
  DataConfig cfg;
  cfg.max_length = 256;
  cfg.pad_to = PadTo::MaxLength;
  DatasetHeader info;
  info.eos_id = 2;
  info.pad_id = -1;  // LLaMA has no pad: pad with EOS, as weighted_mtp
  CollateOptions o = CollateOptions::from(cfg, info);
  EXPECT_EQ(o.max_length, 256);
  EXPECT_TRUE(o.pad_to_max_length);
  EXPECT_EQ(o.pad_id, 2);
  info.pad_id = 3;
  EXPECT_EQ(CollateOptions::from(cfg, info).pad_id, 3);
}

}  // namespace
}  // namespace wmtp
