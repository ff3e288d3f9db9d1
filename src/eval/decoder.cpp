// Plain and self-speculative decoding of a batch of sequences over the model's KV cache.
#include "eval/decoder.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

#include "core/error.h"

namespace wmtp {

void DecodeStats::add(const DecodeStats& o) {
  forwards += o.forwards;
  tokens += o.tokens;
  if (drafted.size() < o.drafted.size()) drafted.resize(o.drafted.size(), 0), accepted.resize(o.drafted.size(), 0);
  for (size_t i = 0; i < o.drafted.size(); ++i) drafted[i] += o.drafted[i], accepted[i] += o.accepted[i];
  over_context += o.over_context;
  context_cut += o.context_cut;
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

// One sequence of the batch while it decodes.
struct Row {
  size_t id;  // its index among the call's prompts
  Emitter out;
  TokenRng* rng;
  std::vector<int64_t> pending;        // the next forward's tokens: the prompt, then [next token, drafts...]
  int64_t drafts = 0;                  // how many of pending's last tokens are drafts
  std::vector<std::vector<double>> q;  // the distributions sampled drafts were drawn from
  int64_t limit = 0;                   // positions its cache may keep: max_seq_len, or prompt + max_new_tokens
  int64_t base() const { return static_cast<int64_t>(pending.size()) - 1 - drafts; }  // the last certain token
};

// A forward's logits where the rows read them: row b's positions base + i (i < N), every head k < K.
// Head 0 at base .. base + drafts verifies the drafts; heads 1.. at the last kept position draft the
// next ones. One unembedding for both: which position the drafts come from is known only after the
// verdict, and a second pass over the output matrix costs more than the few rows it saves.
struct StepLogits {
  int64_t N = 1, K = 1, V = 0;
  at::Tensor argmax;  // greedy: [L * N, K] int64 on the host
  at::Tensor probs;   // sampling: logits [L * N, K, V] in double on the host
  int64_t greedy(int64_t b, int64_t i, int64_t k) const { return argmax.data_ptr<int64_t>()[(b * N + i) * K + k]; }
  std::vector<double> dist(int64_t b, int64_t i, int64_t k, const SamplingConfig& s) const {
    return next_token_probs(probs.data_ptr<double>() + ((b * N + i) * K + k) * V, static_cast<size_t>(V), s);
  }
};

// One forward of the trunk and heads 0..K-1 over every row's pending tokens (padded to the longest
// by repeating the row's last one: the cache keeps only real positions, see kv_cache.h).
StepLogits forward_step(const MtpModel& model, ParamSource& src, const std::vector<Row>& rows, DecodeCache& cache,
                        const DecodeOptions& opt) {
  const int64_t L = static_cast<int64_t>(rows.size()), K = opt.speculative;
  StepLogits out;
  out.K = K;
  int64_t T = 0;
  for (const Row& r : rows) {
    T = std::max<int64_t>(T, static_cast<int64_t>(r.pending.size()));
    out.N = std::max<int64_t>(out.N, r.drafts + 1);
  }
  const int64_t N = out.N;
  std::vector<int64_t> ids(static_cast<size_t>(L * T)), pick(static_cast<size_t>(L * N));
  bool all_read = N == T;  // every row's positions 0..T-1 are read: no gather
  for (int64_t b = 0; b < L; ++b) {
    const Row& r = rows[static_cast<size_t>(b)];
    const int64_t Tb = static_cast<int64_t>(r.pending.size());
    for (int64_t s = 0; s < T; ++s)
      ids[static_cast<size_t>(b * T + s)] = r.pending[static_cast<size_t>(std::min(s, Tb - 1))];
    for (int64_t i = 0; i < N; ++i) pick[static_cast<size_t>(b * N + i)] = b * T + std::min(r.base() + i, T - 1);
    all_read = all_read && r.base() == 0;
  }
  auto longs = at::TensorOptions().dtype(at::kLong);
  at::Tensor z = forward_trunk_cached(model, src, at::tensor(ids, longs).view({L, T}).to(opt.device), cache);
  std::vector<at::Tensor> h;
  for (int64_t k = 0; k < K; ++k) h.push_back(forward_head_block_cached(model, src, k, z, cache));
  at::Tensor hs = (K == 1 ? h[0].unsqueeze(2) : at::stack(h, 2)).reshape({L * T, K, -1});  // [L*T, K, D]
  if (!all_read) hs = hs.index_select(0, at::tensor(pick, longs).to(opt.device));
  at::Tensor logits = model.forward_output(src, hs);                                           // [L*N, K, V]
  if (opt.vocab > 0 && opt.vocab < logits.size(-1)) logits = logits.narrow(-1, 0, opt.vocab);  // padded rows
  out.V = logits.size(-1);
  if (opt.sampling.greedy()) out.argmax = logits.argmax(-1).to(at::kCPU).contiguous();
  else
    out.probs = logits.to(at::kCPU, at::kDouble).contiguous();
  return out;
}

// Row b after a forward from cache length `len`: its drafts checked against head 0 (greedy: its
// argmax; sampled: the rejection rule against the distribution each was drawn from), the accepted
// ones and then head 0's token emitted, `len` set to the positions to keep (the inputs through the
// last accepted draft), and the next drafts taken. Returns true when the row is finished.
bool advance_row(Row& r, const StepLogits& lg, int64_t b, const DecodeOptions& opt, int64_t& len) {
  const SamplingConfig& s = opt.sampling;
  DecodeStats& stats = r.out.stats;
  const int64_t base = r.base();
  int64_t m = 0, next = -1;
  for (int64_t i = 0; i < r.drafts; ++i) {
    const int64_t d = r.pending[static_cast<size_t>(base + 1 + i)];
    ++stats.drafted[static_cast<size_t>(i)];
    bool ok = false;
    int64_t tok;
    if (s.greedy()) {
      tok = lg.greedy(b, i, 0);
      ok = tok == d;
    } else {
      tok = accept_draft(lg.dist(b, i, 0, s), r.q[static_cast<size_t>(i)], d, *r.rng, &ok);
    }
    if (!ok) {
      next = tok;
      break;
    }
    ++stats.accepted[static_cast<size_t>(i)];
    ++m;
    if (r.out.emit(d)) return true;
  }
  if (next < 0) next = s.greedy() ? lg.greedy(b, m, 0) : draw_token(lg.dist(b, m, 0, s), *r.rng);  // all kept
  if (r.out.emit(next)) return true;
  len += base + 1 + m;
  if (len + 1 > r.limit) {  // the model's context is full (prompt + max_new_tokens never is: see decode_batch)
    r.out.result.finish_reason = "length";
    ++stats.context_cut;
    return true;
  }
  // Heads 1.. at the last kept position predict the tokens after `next`.
  r.drafts = std::max<int64_t>(std::min({opt.speculative - 1, r.out.remaining(), r.limit - len - 1}), 0);
  r.pending.assign(1, next);
  r.q.clear();
  for (int64_t k = 1; k <= r.drafts; ++k) {
    if (s.greedy()) {
      r.pending.push_back(lg.greedy(b, m, k));
    } else {
      r.q.push_back(lg.dist(b, m, k, s));
      r.pending.push_back(draw_token(r.q.back(), *r.rng));
    }
  }
  return false;
}

}  // namespace

std::vector<DecodeResult> decode_batch(const MtpModel& model, ParamSource& src,
                                       const std::vector<std::vector<int64_t>>& prompts, const DecodeOptions& opt,
                                       std::vector<TokenRng>& rngs, const std::vector<StopCheck>& stops,
                                       DecodeStats* stats_out) {
  c10::NoGradGuard no_grad;
  const int64_t K = opt.speculative, max_seq_len = model.args().max_seq_len;
  if (K < 1 || K > model.n_future())
    throw_usage("--speculative ", K, " must lie in [2, n_future = ", model.n_future(), "] (1: plain decoding)");
  WMTP_CHECK(rngs.size() == prompts.size() && (stops.empty() || stops.size() == prompts.size()),
             "decode_batch: ", prompts.size(), " prompts, ", rngs.size(), " streams, ", stops.size(), " stop checks");
  static const StopCheck kNone;
  DecodeStats stats;
  stats.drafted.assign(static_cast<size_t>(K - 1), 0);
  stats.accepted = stats.drafted;
  std::vector<DecodeResult> results(prompts.size());
  std::vector<Row> rows;
  int64_t capacity = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const int64_t P = static_cast<int64_t>(prompts[b].size());
    WMTP_CHECK(P > 0, "decode_batch: empty prompt");
    results[b].finish_reason = "length";
    if (opt.max_new_tokens <= 0) continue;
    if (P >= max_seq_len) {  // no room for a new token in the model's context
      ++stats.over_context;
      continue;
    }
    // Room for every position a row can keep: a row that is not finished holds prompt + emitted - 1
    // positions and feeds at most its remaining tokens more, so prompt + max_new_tokens bounds it.
    const int64_t limit = std::min(max_seq_len, P + opt.max_new_tokens);
    capacity = std::max(capacity, limit);
    rows.push_back(
        Row{b, Emitter{opt, stops.empty() ? kNone : stops[b], stats, {}}, &rngs[b], prompts[b], 0, {}, limit});
  }
  if (!rows.empty()) {
    DecodeCache cache = make_decode_cache(model, static_cast<int64_t>(rows.size()), capacity, opt.dtype, opt.device, K);
    // Inference mode skips the autograd bookkeeping no-grad still does on every operator (version
    // counters, view records): a decode forward is many small operators. The cache and the RoPE table
    // are made above it, as normal tensors, so that nothing an inference tensor cannot do reaches them.
    c10::InferenceMode inference;
    while (!rows.empty()) {
      std::vector<int64_t> lens = cache.lens();
      const StepLogits lg = forward_step(model, src, rows, cache, opt);
      std::vector<int64_t> keep;
      for (size_t b = 0; b < rows.size(); ++b) {
        ++stats.forwards;  // per sequence, so that tokens per forward means the same at any batch size
        if (advance_row(rows[b], lg, static_cast<int64_t>(b), opt, lens[b]))
          results[rows[b].id] = std::move(rows[b].out.result);
        else
          keep.push_back(static_cast<int64_t>(b));
      }
      cache.truncate(lens);
      if (keep.size() < rows.size()) {  // finished rows leave the batch
        cache.keep_rows(keep);
        std::vector<Row> live;
        for (int64_t b : keep) live.push_back(std::move(rows[static_cast<size_t>(b)]));
        rows = std::move(live);
      }
    }
  }
  if (stats_out) stats_out->add(stats);
  return results;
}

DecodeResult decode_sequence(const MtpModel& model, ParamSource& src, const std::vector<int64_t>& prompt,
                             const DecodeOptions& opt, TokenRng& rng, const StopCheck& stop, DecodeStats* stats) {
  std::vector<TokenRng> rngs{rng};
  std::vector<StopCheck> stops;
  if (stop) stops.push_back(stop);
  DecodeResult r = std::move(decode_batch(model, src, {prompt}, opt, rngs, stops, stats).front());
  rng = rngs.front();  // the caller's stream moves on by what the decode drew
  return r;
}

}  // namespace wmtp
