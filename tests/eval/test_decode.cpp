// Decoding: plain KV-cache greedy equals greedy by full recompute; self-speculative greedy equals plain
// greedy token for token over many prompts; speculative sampling's token frequencies fit the exact
// head-0 distribution (chi-square), alone and as rows of batches beside other prompts, while drafts
// kept without the rejection rule do not; batched decoding, plain and speculative, equals
// one-at-a-time decoding (greedy and sampled, rows of different lengths accepting different numbers
// of drafts and ending at different steps) and greedy by full recompute; a padded model vocabulary
// decodes as the unpadded model; a model still trains after a decode (inference mode leaks no tensor).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "eval/decoder.h"
#include "model/local_params.h"
#include "model/mtp.h"
#include "tiny_model.h"

namespace wmtp {
namespace {

// A tiny model whose logits are decisive (output weight scaled: random init gives near-uniform
// logits, where greedy near-ties and p ~ q would make the tests weak). Extra heads 1..`copied` are
// head 0's block, so their drafts are sometimes right and the accept path runs.
struct Tiny {
  MtpModel model;
  std::unique_ptr<LocalParams> src;
  Tiny(int64_t n_future, uint64_t seed, double out_scale, int64_t copied) : model(test::tiny_args(2, n_future)) {
    auto p = model.init_params(seed);
    p.at("output.weight").mul_(out_scale);
    for (int64_t k = 1; k <= copied && k < n_future; ++k) {
      const std::string from = model.head_unit(0) + ".", to = model.head_unit(k) + ".";
      for (auto& kv : p)
        if (kv.first.rfind(to, 0) == 0) kv.second.copy_(p.at(from + kv.first.substr(to.size())));
    }
    src = std::make_unique<LocalParams>(model.param_specs(), std::move(p));
  }
};

std::vector<int64_t> random_prompt(int64_t len, int64_t V, uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor t = at::randint(V, {len}, g, at::TensorOptions().dtype(at::kLong));
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + len);
}

// Greedy by recomputing the whole sequence with the training forward at every step (no cache).
std::vector<int64_t> greedy_full_recompute(const Tiny& m, std::vector<int64_t> seq, int64_t n) {
  c10::NoGradGuard ng;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor t = at::tensor(seq, at::TensorOptions().dtype(at::kLong)).view({1, -1});
    at::Tensor l = m.model.forward_logits(*m.src, t, ForwardOptions{}, /*all_heads=*/false);
    const int64_t tok = l[0][-1][0].argmax().item<int64_t>();
    out.push_back(tok);
    seq.push_back(tok);
  }
  return out;
}

TEST(Decode, CachedGreedyEqualsFullRecompute) {
  Tiny m(3, 11, 30.0, 0);
  for (uint64_t s = 0; s < 8; ++s) {
    auto prompt = random_prompt(1 + static_cast<int64_t>(s) * 2, 64, s);
    DecodeOptions o;
    o.max_new_tokens = 20;
    TokenRng rng(0);
    DecodeResult r = decode_sequence(m.model, *m.src, prompt, o, rng);
    EXPECT_EQ(r.tokens, greedy_full_recompute(m, prompt, 20)) << "prompt " << s;
    EXPECT_EQ(r.finish_reason, "length");
  }
}

TEST(Decode, SpeculativeGreedyIsTokenIdenticalToPlain) {
  for (bool copy : {false, true}) {
    Tiny m(4, copy ? 5 : 6, 30.0, copy ? 3 : 0);
    DecodeStats stats;
    int64_t compared = 0;
    for (uint64_t s = 0; s < 60; ++s) {
      auto prompt = random_prompt(1 + static_cast<int64_t>(s % 17), 64, 100 + s);
      DecodeOptions o;
      o.max_new_tokens = 24;
      o.eos_id = 2;
      TokenRng r0(0);
      DecodeResult plain = decode_sequence(m.model, *m.src, prompt, o, r0);
      for (int64_t K = 2; K <= 4; ++K) {
        o.speculative = K;
        TokenRng r1(0);
        DecodeResult spec = decode_sequence(m.model, *m.src, prompt, o, r1, nullptr, &stats);
        ASSERT_EQ(spec.tokens, plain.tokens) << "prompt " << s << " K " << K << " copied heads " << copy;
        ASSERT_EQ(spec.finish_reason, plain.finish_reason);
        ++compared;
      }
    }
    EXPECT_EQ(compared, 180);
    int64_t accepted = 0;
    for (int64_t a : stats.accepted) accepted += a;
    if (copy) {
      EXPECT_GT(accepted, 0) << "no draft was ever accepted: the accept path was not exercised";
    }
    std::printf("copied heads %d: %.3f tokens per forward, head-1 acceptance %lld/%lld\n", copy ? 1 : 0,
                static_cast<double>(stats.tokens) / static_cast<double>(stats.forwards),
                static_cast<long long>(stats.accepted[0]), static_cast<long long>(stats.drafted[0]));
  }
}

TEST(Decode, StopCheckAndEos) {
  Tiny m(2, 3, 30.0, 0);
  auto prompt = random_prompt(5, 64, 9);
  DecodeOptions o;
  o.max_new_tokens = 30;
  TokenRng rng(0);
  DecodeResult all = decode_sequence(m.model, *m.src, prompt, o, rng);
  ASSERT_EQ(all.tokens.size(), 30u);
  o.eos_id = all.tokens[4];  // the first occurrence of this token ends it, without the EOS itself
  size_t first = 0;
  while (all.tokens[first] != o.eos_id) ++first;
  DecodeResult e = decode_sequence(m.model, *m.src, prompt, o, rng);
  EXPECT_EQ(e.finish_reason, "eos");
  EXPECT_EQ(e.tokens, std::vector<int64_t>(all.tokens.begin(), all.tokens.begin() + static_cast<long>(first)));
  o.eos_id = -1;
  DecodeResult s = decode_sequence(m.model, *m.src, prompt, o, rng,
                                   [](const std::vector<int64_t>& t) { return t.size() == 7; });
  EXPECT_EQ(s.finish_reason, "stop");
  EXPECT_EQ(s.tokens.size(), 7u);
}

// The decoder runs its forwards in inference mode; what outlives a decode (the model's shared RoPE
// table, grown for the cache) must stay a normal tensor, or a later training step of the same model in
// the same process could not save it for backward.
TEST(Decode, TrainingAfterDecodingStillBackpropagates) {
  Tiny m(3, 4, 1.0, 0);
  DecodeOptions o;
  o.max_new_tokens = 20;
  o.speculative = 3;
  TokenRng rng(0);
  decode_sequence(m.model, *m.src, random_prompt(5, 64, 1), o, rng);
  const std::vector<int64_t> seq = random_prompt(16, 64, 2);  // within the table the decode grew
  const at::Tensor tokens = at::tensor(seq, at::TensorOptions().dtype(at::kLong)).view({1, -1});
  ASSERT_NO_THROW(m.model.forward_logits(*m.src, tokens, ForwardOptions{}).sum().backward());
  int64_t with_grad = 0;
  for (const at::Tensor& p : m.src->trainable_params()) with_grad += p.grad().defined() ? 1 : 0;
  EXPECT_GT(with_grad, 0);
}

TEST(Decode, BatchedEqualsOneAtATime) {
  // Heads 1 and 2 copied from head 0, head 3 not: drafts are sometimes accepted, sometimes not.
  Tiny m(4, 21, 30.0, 2);
  std::vector<std::vector<int64_t>> prompts;
  for (uint64_t s = 0; s < 60; ++s)
    prompts.push_back(random_prompt(1 + static_cast<int64_t>((s * 7) % 29), 64, 300 + s));
  // Rows stop at different steps: EOS (id 2), a stop check on some rows, max_new_tokens on the rest.
  auto stop_of = [](size_t i) -> StopCheck {
    if (i % 3 != 0) return nullptr;
    return [i](const std::vector<int64_t>& t) { return static_cast<size_t>(t.size()) == 3 + i % 5; };
  };
  for (int64_t K : {1, 2, 4}) {
    for (bool sample : {false, true}) {
      DecodeOptions o;
      o.max_new_tokens = 16;
      o.eos_id = 2;
      o.speculative = K;
      if (sample) o.sampling = SamplingConfig{0.8, 0.9};
      std::vector<DecodeResult> one;
      std::vector<DecodeStats> one_stats(prompts.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        TokenRng r = stream_rng(7, static_cast<int64_t>(i), 0);
        one.push_back(decode_sequence(m.model, *m.src, prompts[i], o, r, stop_of(i), &one_stats[i]));
      }
      int64_t ends[3] = {0, 0, 0};  // eos, stop, length among the rows
      for (const auto& r : one) ++ends[r.finish_reason == "eos" ? 0 : r.finish_reason == "stop" ? 1 : 2];
      EXPECT_TRUE(ends[0] > 0 && ends[1] > 0 && ends[2] > 0) << "every row ended the same way: a weak test";
      if (K > 1) {  // rows keep different numbers of drafts: their cache lengths part
        std::vector<int64_t> rates;
        for (const auto& st : one_stats) rates.push_back(st.accepted[0] * 100 / std::max<int64_t>(st.drafted[0], 1));
        EXPECT_NE(*std::min_element(rates.begin(), rates.end()), *std::max_element(rates.begin(), rates.end()));
        int64_t accepted = 0;
        for (const auto& st : one_stats) accepted += st.accepted[0];
        EXPECT_GT(accepted, 0) << "no draft was ever accepted: the accept path was not exercised";
      }
      for (size_t B : {size_t{7}, size_t{16}}) {  // the last batch of each is partial
        for (size_t first = 0; first < prompts.size(); first += B) {
          std::vector<std::vector<int64_t>> sub;
          std::vector<TokenRng> rngs;
          std::vector<StopCheck> stops;
          DecodeStats want;
          for (size_t i = first; i < std::min(first + B, prompts.size()); ++i) {
            sub.push_back(prompts[i]);
            rngs.push_back(stream_rng(7, static_cast<int64_t>(i), 0));
            stops.push_back(stop_of(i));
            want.add(one_stats[i]);
          }
          DecodeStats stats;
          const int64_t trunk_runs = m.src->begin_count("layers.0");
          std::vector<DecodeResult> got = decode_batch(m.model, *m.src, sub, o, rngs, stops, &stats);
          // One forward per step for the whole batch: as many as its longest-running row needs alone.
          int64_t steps = 0;
          for (size_t i = first; i < first + sub.size(); ++i) steps = std::max(steps, one_stats[i].forwards);
          EXPECT_EQ(m.src->begin_count("layers.0") - trunk_runs, steps)
              << "batch " << B << " K " << K << ": not batched";
          ASSERT_EQ(got.size(), sub.size());
          for (size_t j = 0; j < got.size(); ++j) {
            ASSERT_EQ(got[j].tokens, one[first + j].tokens)
                << "prompt " << first + j << " batch " << B << " K " << K << " sampled " << sample;
            ASSERT_EQ(got[j].finish_reason, one[first + j].finish_reason) << "prompt " << first + j;
          }
          // Each row ran the forwards and checked the drafts it runs alone.
          EXPECT_EQ(stats.tokens, want.tokens);
          EXPECT_EQ(stats.forwards, want.forwards);
          EXPECT_EQ(stats.drafted, want.drafted);
          EXPECT_EQ(stats.accepted, want.accepted);
          if (K == 1) {
            EXPECT_EQ(stats.forwards, stats.tokens) << "plain decoding: one forward per token and sequence";
          }
        }
      }
    }
  }
  // Greedy rows, plain and speculative, against the training forward recomputed over the whole
  // sequence (no cache, no batch).
  for (int64_t K : {1, 4}) {
    DecodeOptions o;
    o.max_new_tokens = 12;
    o.speculative = K;
    std::vector<std::vector<int64_t>> sub(prompts.begin(), prompts.begin() + 6);
    std::vector<TokenRng> rngs(sub.size(), TokenRng(0));
    std::vector<DecodeResult> got = decode_batch(m.model, *m.src, sub, o, rngs);
    for (size_t j = 0; j < sub.size(); ++j)
      EXPECT_EQ(got[j].tokens, greedy_full_recompute(m, sub[j], 12)) << "prompt " << j << " K " << K;
  }
}

TEST(Decode, ContextLimits) {
  // A prompt that fills the model's context gets nothing; one that nearly does stops at it.
  Tiny m(3, 4, 30.0, 0);
  const int64_t S = m.model.args().max_seq_len;
  std::vector<std::vector<int64_t>> prompts = {random_prompt(S, 64, 1), random_prompt(S - 3, 64, 2),
                                               random_prompt(5, 64, 3)};
  for (int64_t K : {1, 3}) {
    DecodeOptions o;
    o.max_new_tokens = 10;
    o.speculative = K;
    std::vector<TokenRng> rngs(3, TokenRng(0));
    DecodeStats st;
    std::vector<DecodeResult> r = decode_batch(m.model, *m.src, prompts, o, rngs, {}, &st);
    EXPECT_TRUE(r[0].tokens.empty());
    EXPECT_EQ(r[0].finish_reason, "length");
    // The prompt's S-3 positions and 3 new tokens fill the context; a 4th is read from the last position.
    EXPECT_EQ(r[1].tokens.size(), 4u);
    EXPECT_EQ(r[1].finish_reason, "length");
    EXPECT_EQ(r[2].tokens.size(), 10u);
    EXPECT_EQ(st.over_context, 1);
    EXPECT_EQ(st.context_cut, 1);
  }
}

TEST(Decode, PaddedVocabularyDecodesAsTheUnpaddedModel) {
  // A model vocabulary padded past the tokenizer's (trainers allow it): the first V rows of the
  // embedding and output are the unpadded model's, the P rows past them 4x output rows 0..P-1, large
  // enough that a decode which looked at them would emit them. With DecodeOptions::vocab = V the
  // padded model must emit the unpadded model's ids: greedy and sampled, plain and speculative, in a batch.
  Tiny m(4, 9, 30.0, 2);
  const ModelArgs& a = m.model.args();
  const int64_t V = a.vocab_size, P = 16;
  ModelArgs pa = a;
  pa.vocab_size = V + P;
  MtpModel padded(pa);
  std::unordered_map<std::string, at::Tensor> p;
  for (const auto& kv : m.src->params()) p[kv.first] = kv.second.detach().clone();
  const at::Tensor out = p.at("output.weight");
  p["output.weight"] = at::cat({out, out.slice(0, 0, P) * 4.0});
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(3);
  p["tok_embeddings.weight"] = at::cat({p.at("tok_embeddings.weight"), at::randn({P, a.dim}, g)});
  LocalParams padded_src(padded.param_specs(), std::move(p));
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < 5; ++i) prompts.push_back(random_prompt(3 + 2 * i, V, 90 + static_cast<uint64_t>(i)));
  int64_t padded_ids_unmasked = 0;
  for (const SamplingConfig sampling : {SamplingConfig{0.0, 1.0}, SamplingConfig{0.8, 0.95}}) {
    for (int64_t K : {1, 3}) {
      DecodeOptions o;
      o.max_new_tokens = 16;
      o.speculative = K;
      o.sampling = sampling;
      auto run = [&](const MtpModel& model, ParamSource& src, int64_t vocab) {
        o.vocab = vocab;
        std::vector<TokenRng> rngs;
        for (size_t i = 0; i < prompts.size(); ++i) rngs.push_back(stream_rng(5, static_cast<int64_t>(i), 0));
        return decode_batch(model, src, prompts, o, rngs);
      };
      const std::vector<DecodeResult> want = run(m.model, *m.src, 0), got = run(padded, padded_src, V),
                                      unmasked = run(padded, padded_src, 0);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i << " K " << K << " T " << sampling.temperature;
        for (int64_t t : unmasked[i].tokens) padded_ids_unmasked += t >= V ? 1 : 0;
      }
    }
  }
  EXPECT_GT(padded_ids_unmasked, 0) << "the padded rows are never chosen unmasked: a weak test";
}

TEST(Decode, NucleusKeepsTheSmallestPrefixRule) {
  // probabilities 0.5, 0.3, 0.15, 0.05 (logits = log p, T = 1): cumsum 0.5, 0.8, 0.95, 1.0
  at::Tensor l = at::log(at::tensor({0.15, 0.5, 0.05, 0.3}, at::kDouble));
  auto p = next_token_probs(l, {1.0, 0.85});  // 0.95 > 0.85 removed: keeps 0.5, 0.3
  EXPECT_NEAR(p[1], 0.5 / 0.8, 1e-12);
  EXPECT_NEAR(p[3], 0.3 / 0.8, 1e-12);
  EXPECT_EQ(p[0], 0.0);
  EXPECT_EQ(p[2], 0.0);
  auto first = next_token_probs(l, {1.0, 0.1});  // the first token is always kept
  EXPECT_NEAR(first[1], 1.0, 1e-12);
}

// Chi-square statistic of counts against expected probabilities, bins with expectation < 5 pooled;
// returns {statistic, critical value at p = 0.001 (Wilson-Hilferty)}.
std::pair<double, double> chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double stat = 0.0, pool_e = 0.0;
  int64_t pool_c = 0, bins = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double e = probs[i] * static_cast<double>(n);
    if (e < 5.0) {
      pool_e += e;
      pool_c += counts[i];
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++bins;
  }
  if (pool_e > 0.0) {
    stat += (pool_c - pool_e) * (pool_c - pool_e) / std::max(pool_e, 1e-9);
    ++bins;
  }
  const double df = static_cast<double>(bins - 1), z = 3.090;
  const double crit = df * std::pow(1.0 - 2.0 / (9.0 * df) + z * std::sqrt(2.0 / (9.0 * df)), 3.0);
  return {stat, crit};
}

TEST(Decode, SpeculativeSamplingMatchesHeadZeroDistribution) {
  c10::NoGradGuard ng;
  Tiny m(3, 21, 8.0, 0);
  const int64_t V = 64, N = 3000;
  const std::vector<int64_t> prompt = {5, 17, 3, 40};
  at::Tensor pt = at::tensor(prompt, at::kLong).view({1, -1});
  at::Tensor seqs = at::cat({pt.expand({V, -1}), at::arange(V, at::kLong).view({V, 1})}, 1);
  at::Tensor l1 = m.model.forward_logits(*m.src, pt, {}, true)[0][-1];                         // [K, V]
  at::Tensor l2 = m.model.forward_logits(*m.src, seqs, {}, false).select(1, -1).select(1, 0);  // [V, V]
  // Plain sampling, then temperature with a nucleus (the drafts' and the target's distributions
  // then have holes: the residual max(0, p - q) must still give p).
  for (const SamplingConfig cfg : {SamplingConfig{1.0, 1.0}, SamplingConfig{0.7, 0.8}}) {
    // Exact distribution of the second generated token by full forwards: sum over t1 of p(t1) p(t2 | t1).
    const std::vector<double> p1 = next_token_probs(l1[0], cfg), q1 = next_token_probs(l1[1], cfg);
    std::vector<double> exact(static_cast<size_t>(V), 0.0);
    for (int64_t a = 0; a < V; ++a) {
      const std::vector<double> p2 = next_token_probs(l2[a], cfg);
      for (int64_t t = 0; t < V; ++t)
        exact[static_cast<size_t>(t)] += p1[static_cast<size_t>(a)] * p2[static_cast<size_t>(t)];
    }
    DecodeOptions o;
    o.max_new_tokens = 2;
    o.speculative = 3;
    o.sampling = cfg;
    std::vector<int64_t> spec(V, 0), naive(V, 0), batched(V, 0);
    DecodeStats stats;
    for (int64_t s = 0; s < N; ++s) {
      TokenRng rng = stream_rng(7, 0, s);
      DecodeResult r = decode_sequence(m.model, *m.src, prompt, o, rng, nullptr, &stats);
      ASSERT_EQ(r.tokens.size(), 2u);
      ++spec[static_cast<size_t>(r.tokens[1])];
      ++naive[static_cast<size_t>(draw_token(q1, rng))];  // the wrong rule: head 1's draft kept whatever head 0 says
    }
    // The same prompt as rows 0, 2, 4 of batches of five, beside prompts of other lengths (own
    // streams: the draws differ from the loop above, the distribution must not).
    for (int64_t s = 0; s < N; s += 3) {
      std::vector<std::vector<int64_t>> rows = {prompt, random_prompt(2, V, 50 + s), prompt,
                                                random_prompt(9, V, 60 + s), prompt};
      std::vector<TokenRng> rngs;
      for (int64_t j = 0; j < 5; ++j) rngs.push_back(stream_rng(8, j, s));
      std::vector<DecodeResult> r = decode_batch(m.model, *m.src, rows, o, rngs);
      for (size_t j : {size_t{0}, size_t{2}, size_t{4}}) {
        ASSERT_EQ(r[j].tokens.size(), 2u);
        ++batched[static_cast<size_t>(r[j].tokens[1])];
      }
    }
    auto in_batches = chi_square(batched, exact, N + (3 - N % 3) % 3);
    std::printf("  in batches of five: chi-square %.1f, critical %.1f\n", in_batches.first, in_batches.second);
    EXPECT_LT(in_batches.first, in_batches.second) << "batched speculative samples do not follow head 0's distribution";
    auto good = chi_square(spec, exact, N), bad = chi_square(naive, exact, N);
    std::printf(
        "T %.1f top_p %.1f: chi-square speculative %.1f, drafts kept without the rule %.1f, critical "
        "(p = 0.001) %.1f; head-1 acceptance %lld/%lld\n",
        cfg.temperature, cfg.top_p, good.first, bad.first, good.second, static_cast<long long>(stats.accepted[0]),
        static_cast<long long>(stats.drafted[0]));
    EXPECT_LT(good.first, good.second) << "speculative samples do not follow head 0's distribution";
    EXPECT_GT(bad.first, bad.second) << "the test cannot tell a wrong rule from the right one";
    EXPECT_GT(stats.accepted[0], 0);
    EXPECT_LT(stats.accepted[0], stats.drafted[0]);  // both the accept and the resample paths ran
  }
}

}  // namespace
}  // namespace wmtp
