// KV-cache decoding against the full forward: logits of every head computed incrementally (a prompt,
// then single tokens, then chunks, with a rollback in between; and rows of a batch keeping different
// numbers of each forward's tokens, one row leaving) equal forward_logits recomputed over the whole
// sequence — an independent path (the training forward: causal_attention over all positions, RoPE
// from position 0).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "model/kv_cache.h"
#include "model_test_util.h"
#include "rel_diff.h"

namespace wmtp {
namespace {

using test::rel_diff;

// Heads' logits [B, T, K, V] at the cache's next T positions, through the cached path.
at::Tensor cached_logits(const MtpModel& m, ParamSource& src, const at::Tensor& tokens, DecodeCache& cache) {
  at::Tensor z = forward_trunk_cached(m, src, tokens, cache);
  std::vector<at::Tensor> hs;
  for (int64_t k = 0; k < m.n_future(); ++k) hs.push_back(forward_head_block_cached(m, src, k, z, cache));
  return m.forward_output(src, at::stack(hs, 2));
}

TEST(KvCache, IncrementalLogitsEqualFullRecompute) {
  c10::NoGradGuard no_grad;
  MtpModel m(test::tiny_args(2, 3));
  LocalParams src = test::make_local(m, 7);
  const int64_t B = 2, S = 24;
  at::Tensor tokens = test::random_tokens(B, S, m.args().vocab_size, 3);
  at::Tensor full = m.forward_logits(src, tokens, ForwardOptions{});  // [B, S, K, V]

  DecodeCache cache = make_decode_cache(m, B, S, at::kFloat, at::kCPU);
  // Chunks: a 5-token prompt, four single tokens, chunks of 3 and 4, the rest one by one.
  std::vector<int64_t> chunks = {5, 1, 1, 1, 1, 3, 4};
  int64_t pos = 0;
  std::vector<at::Tensor> parts;
  for (int64_t c : chunks) {
    parts.push_back(cached_logits(m, src, tokens.slice(1, pos, pos + c), cache));
    pos += c;
  }
  // A rollback: run 3 wrong tokens, forget them, then the real ones.
  at::Tensor wrong = (tokens.slice(1, pos, pos + 3) + 1) % m.args().vocab_size;
  cached_logits(m, src, wrong, cache);
  cache.truncate(pos);
  while (pos < S) {
    parts.push_back(cached_logits(m, src, tokens.slice(1, pos, pos + 1), cache));
    ++pos;
  }
  at::Tensor inc = at::cat(parts, 1);
  ASSERT_EQ(inc.sizes(), full.sizes());
  EXPECT_LT(rel_diff(inc, full), 1e-5) << "incremental KV-cache logits differ from the full forward";
  EXPECT_EQ(cache.len(), S);
}

TEST(KvCache, RowsOfDifferentLengthsEqualFullRecompute) {
  c10::NoGradGuard no_grad;
  MtpModel m(test::tiny_args(2, 3));
  LocalParams src = test::make_local(m, 9);
  const int64_t B = 3, S = 20, T = 3, V = m.args().vocab_size;
  at::Tensor tokens = test::random_tokens(B, S, V, 5);
  at::Tensor full = m.forward_logits(src, tokens, ForwardOptions{});  // [B, S, K, V]
  DecodeCache cache = make_decode_cache(m, B, S, at::kFloat, at::kCPU);
  std::vector<int64_t> rows = {0, 1, 2}, pos(B, 0);  // the batch's rows; each row's kept positions
  std::vector<std::vector<at::Tensor>> got(B);       // each row's logits, position by position
  // feed(n, keep): every row gets its next n tokens (0 past its end: a padded tail), keeps keep(row).
  auto feed = [&](int64_t n, const std::function<int64_t(int64_t)>& keep) {
    std::vector<at::Tensor> chunk;
    for (int64_t r : rows) {
      at::Tensor t = at::zeros({1, n}, at::kLong);
      const int64_t real = std::min(n, S - pos[r]);
      t.slice(1, 0, real).copy_(tokens[r].slice(0, pos[r], pos[r] + real).view({1, real}));
      chunk.push_back(t);
    }
    at::Tensor l = cached_logits(m, src, at::cat(chunk, 0), cache);  // [rows, n, K, V]
    std::vector<int64_t> lens;
    for (size_t j = 0; j < rows.size(); ++j) {
      const int64_t r = rows[j], k = std::min({keep(r), n, S - pos[r]});
      for (int64_t i = 0; i < k; ++i) got[r].push_back(l[static_cast<int64_t>(j)][i]);
      pos[r] += k;
      lens.push_back(pos[r]);
    }
    cache.truncate(lens);
  };
  feed(6, [](int64_t r) { return 6 - 2 * r; });  // prompts of 6, 4 and 2 tokens
  for (int64_t step = 0; step < 4; ++step) feed(T, [&](int64_t r) { return (step + r) % T + 1; });
  EXPECT_NE(cache.lens()[0], cache.lens()[1]);
  rows = {0, 2};  // row 1 leaves the batch
  cache.keep_rows({0, 2});
  while (!rows.empty()) {  // a row that reached S leaves too
    feed(T, [&](int64_t r) { return (pos[r] + r) % T + 1; });
    std::vector<int64_t> at, live;
    for (size_t j = 0; j < rows.size(); ++j)
      if (pos[rows[j]] < S) at.push_back(static_cast<int64_t>(j)), live.push_back(rows[j]);
    cache.keep_rows(at);
    rows = live;
  }
  for (int64_t r = 0; r < B; ++r) {
    const int64_t n = static_cast<int64_t>(got[r].size());
    ASSERT_EQ(n, r == 1 ? pos[1] : S);
    EXPECT_LT(rel_diff(at::stack(got[r], 0), full[r].slice(0, 0, n)), 1e-5) << "row " << r;
  }
}

TEST(KvCache, DecodingBuildsTheRopeTableOnce) {
  c10::NoGradGuard no_grad;
  MtpModel m(test::tiny_args(2, 3));
  LocalParams src = test::make_local(m, 7);
  const int64_t before = m.attention_tables().builds();
  DecodeCache cache = make_decode_cache(m, 1, 40, at::kFloat, at::kCPU);
  at::Tensor tokens = test::random_tokens(1, 40, m.args().vocab_size, 5);
  cached_logits(m, src, tokens.slice(1, 0, 8), cache);
  for (int64_t t = 8; t < 40; t += 2) cached_logits(m, src, tokens.slice(1, t, t + 2), cache);
  EXPECT_EQ(m.attention_tables().builds() - before, 1) << "a forward that attends to more positions rebuilt it";
}

TEST(KvCache, OverflowAndBadTruncateThrow) {
  c10::NoGradGuard no_grad;
  MtpModel m(test::tiny_args(1, 2));
  LocalParams src = test::make_local(m, 1);
  DecodeCache cache = make_decode_cache(m, 1, 4, at::kFloat, at::kCPU);
  at::Tensor t = test::random_tokens(1, 3, m.args().vocab_size, 1);
  forward_trunk_cached(m, src, t, cache);
  EXPECT_THROW(forward_trunk_cached(m, src, t, cache), std::exception);
  EXPECT_THROW(cache.truncate(5), std::exception);
  EXPECT_THROW(make_decode_cache(m, 1, m.args().max_seq_len + 1, at::kFloat, at::kCPU), std::exception);
}

}  // namespace
}  // namespace wmtp
