// Plain and self-speculative decoding of one sequence over the model's KV cache; plain decoding of a batch.
#include "eval/decoder.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>

#include "core/error.h"

namespace wmtp {

void DecodeStats::add(const DecodeStats& o) {
  forwards += o.forwards;
  tokens += o.tokens;
  if (drafted.size() < o.drafted.size()) drafted.resize(o.drafted.size(), 0), accepted.resize(o.drafted.size(), 0);
  for (size_t i = 0; i < o.drafted.size(); ++i) drafted[i] += o.drafted[i], accepted[i] += o.accepted[i];
}

int64_t accept_draft(const std::vector<double>& p, const std::vector<double>& q, int64_t d, TokenRng& rng,
                     bool* accepted) {
  const size_t i = static_cast<size_t>(d);
  WMTP_CHECK(i < p.size() && p.size() == q.size(), "accept_draft: draft ", d, " outside the distributions");
  if (rng.uniform() * q[i] < p[i]) {  // u < p/q, i.e. accepted with probability min(1, p/q)
    *accepted = true;
    return d;
  }
  *accepted = false;
  std::vector<double> residual(p.size());
  double sum = 0.0;
  for (size_t j = 0; j < p.size(); ++j) sum += (residual[j] = std::max(0.0, p[j] - q[j]));
  if (sum <= 0.0) return draw_token(p, rng);  // p == q up to rounding: a rejection cannot really happen
  for (double& r : residual) r /= sum;
  return draw_token(residual, rng);
}

namespace {

// Collects emitted tokens and decides when the sequence ends.
struct Emitter {
  const DecodeOptions& opt;
  const StopCheck& stop;
  DecodeStats& stats;
  DecodeResult result;

  bool emit(int64_t token) {  // true: the sequence is finished
    ++stats.tokens;
    if (token == opt.eos_id) {
      result.finish_reason = "eos";
      return true;
    }
    result.tokens.push_back(token);
    if (stop && stop(result.tokens)) {
      result.finish_reason = "stop";
      return true;
    }
    if (static_cast<int64_t>(result.tokens.size()) >= opt.max_new_tokens) {
      result.finish_reason = "length";
      return true;
    }
    return false;
  }
  int64_t remaining() const { return opt.max_new_tokens - static_cast<int64_t>(result.tokens.size()); }
};

at::Tensor ids_tensor(const std::vector<int64_t>& ids, const at::Device& device) {
  return at::tensor(ids, at::TensorOptions().dtype(at::kLong)).view({1, -1}).to(device);
}

int64_t choose(const at::Tensor& logits, const SamplingConfig& s, TokenRng& rng) {
  return s.greedy() ? greedy_token(logits) : draw_token(next_token_probs(logits, s), rng);
}

// What became of a forward's drafts: the first `kept` were accepted and emitted; then `next` replaces
// the first rejected one (-1: none was rejected), unless the sequence is `done`.
struct Verdict {
  int64_t kept = 0, next = -1;
  bool done = false;
};

// Checks drafts[i] against head 0's distribution l0[i] (greedy: its argmax; sampled: the speculative
// acceptance test against q[i], the distribution it was drawn from), emitting each accepted one.
Verdict check_drafts(const at::Tensor& l0, const std::vector<int64_t>& drafts,
                     const std::vector<std::vector<double>>& q, const SamplingConfig& s, TokenRng& rng, Emitter& out) {
  Verdict v;
  for (size_t i = 0; i < drafts.size() && !v.done; ++i) {
    const int64_t d = drafts[i];
    ++out.stats.drafted[i];
    bool ok = false;
    int64_t tok;
    if (s.greedy()) {
      tok = greedy_token(l0[static_cast<int64_t>(i)]);
      ok = tok == d;
    } else {
      tok = accept_draft(next_token_probs(l0[static_cast<int64_t>(i)], s), q[i], d, rng, &ok);
    }
    if (!ok) {
      v.next = tok;
      break;
    }
    ++out.stats.accepted[i];
    ++v.kept;
    v.done = out.emit(d);
  }
  return v;
}

// Drafts `n` tokens after the last kept one from heads 1..n at `row` (h[k]: head k's hidden states),
// appending them to `pending`; sampled drafts keep their distributions in `q`.
void draft_tokens(const MtpModel& model, ParamSource& src, const std::vector<at::Tensor>& h, int64_t row, int64_t n,
                  const SamplingConfig& s, TokenRng& rng, std::vector<int64_t>& pending,
                  std::vector<std::vector<double>>& q) {
  std::vector<at::Tensor> rows;
  for (int64_t k = 1; k <= n; ++k) rows.push_back(h[static_cast<size_t>(k)][row]);
  at::Tensor lk = model.forward_output(src, at::stack(rows, 0));
  for (int64_t k = 0; k < n; ++k) {
    if (s.greedy()) {
      pending.push_back(greedy_token(lk[k]));
    } else {
      q.push_back(next_token_probs(lk[k], s));
      pending.push_back(draw_token(q.back(), rng));
    }
  }
}

}  // namespace

DecodeResult decode_sequence(const MtpModel& model, ParamSource& src, const std::vector<int64_t>& prompt,
                             const DecodeOptions& opt, TokenRng& rng, const StopCheck& stop, DecodeStats* stats_out) {
  c10::NoGradGuard no_grad;
  const int64_t K = opt.speculative;
  if (K < 1 || K > model.n_future())
    throw_usage("--speculative ", K, " must lie in [2, n_future = ", model.n_future(), "] (1: plain decoding)");
  WMTP_CHECK(!prompt.empty(), "decode_sequence: empty prompt");
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t capacity = std::min(model.args().max_seq_len, P + std::max<int64_t>(opt.max_new_tokens, 0) + K);
  DecodeStats stats;
  stats.drafted.assign(static_cast<size_t>(K - 1), 0);
  stats.accepted.assign(static_cast<size_t>(K - 1), 0);
  Emitter out{opt, stop, stats, {}};
  if (opt.max_new_tokens <= 0 || P >= capacity) {  // nothing may be generated (or no room under max_seq_len)
    out.result.finish_reason = "length";
    if (stats_out) stats_out->add(stats);
    return out.result;
  }
  DecodeCache cache = make_decode_cache(model, 1, capacity, opt.dtype, opt.device, K);
  std::vector<int64_t> pending = prompt;  // fed to the next forward: [last token, drafts...]
  std::vector<std::vector<double>> draft_q;  // the distributions sampled drafts came from
  int64_t n_drafts = 0;
  while (true) {
    const int64_t start = cache.len(), T = static_cast<int64_t>(pending.size()), base = T - 1 - n_drafts;
    at::Tensor z = forward_trunk_cached(model, src, ids_tensor(pending, opt.device), cache);
    std::vector<at::Tensor> h;
    for (int64_t k = 0; k < K; ++k) h.push_back(forward_head_block_cached(model, src, k, z, cache)[0]);
    ++stats.forwards;
    // Head 0 at the last certain token and at each draft: the target distribution of the next token.
    at::Tensor l0 = model.forward_output(src, h[0].slice(0, base, T));
    const Verdict v = check_drafts(l0, std::vector<int64_t>(pending.begin() + base + 1, pending.end()), draft_q,
                                   opt.sampling, rng, out);
    if (v.done) break;
    const int64_t m = v.kept;
    const int64_t next = v.next >= 0 ? v.next : choose(l0[m], opt.sampling, rng);  // all kept: head 0's next token
    if (out.emit(next)) break;
    cache.truncate(start + base + 1 + m);  // keep the inputs through the last accepted draft
    if (cache.len() + 1 > capacity) {      // max_seq_len reached
      out.result.finish_reason = "length";
      break;
    }
    // Heads 1.. at the last kept position predict the tokens after `next`.
    const int64_t room = std::min({K - 1, out.remaining(), capacity - cache.len() - 1});
    pending.assign(1, next);
    draft_q.clear();
    n_drafts = std::max<int64_t>(room, 0);
    if (n_drafts > 0) draft_tokens(model, src, h, base + m, n_drafts, opt.sampling, rng, pending, draft_q);
  }
  if (stats_out) stats_out->add(stats);
  return out.result;
}

std::vector<DecodeResult> decode_batch(const MtpModel& model, ParamSource& src,
                                       const std::vector<std::vector<int64_t>>& prompts, const DecodeOptions& opt,
                                       std::vector<TokenRng>& rngs, const std::vector<StopCheck>& stops,
                                       DecodeStats* stats_out) {
  const int64_t B = static_cast<int64_t>(prompts.size());
  WMTP_CHECK(static_cast<int64_t>(rngs.size()) == B && (stops.empty() || stops.size() == prompts.size()),
             "decode_batch: ", B, " prompts, ", rngs.size(), " streams, ", stops.size(), " stop checks");
  auto stop_of = [&](size_t b) -> const StopCheck& {
    static const StopCheck kNone;
    return stops.empty() ? kNone : stops[b];
  };
  int64_t longest = 0;
  for (const auto& p : prompts) {
    WMTP_CHECK(!p.empty(), "decode_batch: empty prompt");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  }
  const int64_t capacity = longest + opt.max_new_tokens;
  std::vector<DecodeResult> results;
  if (B <= 1 || opt.speculative != 1 || opt.max_new_tokens <= 0 || capacity > model.args().max_seq_len) {
    for (size_t b = 0; b < prompts.size(); ++b)
      results.push_back(decode_sequence(model, src, prompts[b], opt, rngs[b], stop_of(b), stats_out));
    return results;
  }
  c10::NoGradGuard no_grad;
  DecodeStats stats;
  std::vector<Emitter> out;
  out.reserve(prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) out.push_back(Emitter{opt, stop_of(b), stats, {}});
  // Left-padded prompts: row b's real tokens end at slot `longest` - 1; its padding repeats its first token.
  std::vector<int64_t> ids(static_cast<size_t>(B * longest)), starts;
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[static_cast<size_t>(b)];
    const int64_t pad = longest - static_cast<int64_t>(p.size());
    starts.push_back(pad);
    for (int64_t s = 0; s < longest; ++s)
      ids[static_cast<size_t>(b * longest + s)] = p[static_cast<size_t>(std::max<int64_t>(s - pad, 0))];
  }
  DecodeCache cache = make_decode_cache(model, B, capacity, opt.dtype, opt.device, 1);
  cache.start = at::tensor(starts, at::TensorOptions().dtype(at::kLong)).to(opt.device);
  at::Tensor pending = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).view({B, longest}).to(opt.device);
  std::vector<bool> live(static_cast<size_t>(B), true);
  int64_t n_live = B;
  while (n_live > 0) {
    at::Tensor z = forward_trunk_cached(model, src, pending, cache);
    at::Tensor h = forward_head_block_cached(model, src, 0, z, cache);
    stats.forwards += n_live;  // per sequence, as decode_sequence counts: tokens per forward stays per sequence
    at::Tensor logits = model.forward_output(src, h.select(1, h.size(1) - 1)).to(at::kCPU);  // [B, V]
    std::vector<int64_t> next(static_cast<size_t>(B), 0);
    for (size_t b = 0; b < live.size(); ++b) {
      if (!live[b]) continue;
      next[b] = choose(logits[static_cast<int64_t>(b)], opt.sampling, rngs[b]);
      if (out[b].emit(next[b])) live[b] = false, --n_live;
    }
    pending = at::tensor(next, at::TensorOptions().dtype(at::kLong)).view({B, 1}).to(opt.device);
  }
  for (Emitter& e : out) results.push_back(std::move(e.result));
  if (stats_out) stats_out->add(stats);
  return results;
}

}  // namespace wmtp
