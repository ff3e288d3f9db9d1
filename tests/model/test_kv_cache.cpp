// KV-cache decoding against the full forward: logits of every head computed incrementally (a prompt,
// then single tokens, then chunks, with a rollback in between) equal forward_logits recomputed over
// the whole sequence — an independent path (the training forward: causal_attention over all
// positions, RoPE from position 0).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <vector>

#include "model/kv_cache.h"
#include "model_test_util.h"

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
