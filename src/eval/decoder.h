// Decoding one sequence with the KV cache: plain head-0 decoding, or self-speculative decoding with
// the MTP heads (--speculative K): heads 1..K-1 draft the K-1 tokens after head 0's, one forward of
// the trunk + every head over [last token, drafts] verifies them against head 0, the longest agreeing
// prefix is kept and the caches are rolled back past it. Greedy drafts are kept while they equal head
// 0's argmax, so the output is head-0 greedy decoding's; sampled drafts go through the speculative
// rejection rule (accept_draft), so the output distribution is head-0 sampling's.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/sampling.h"
#include "model/kv_cache.h"
#include "model/mtp.h"
#include "model/param_source.h"

namespace wmtp {

struct DecodeOptions {
  int64_t max_new_tokens = 512;
  SamplingConfig sampling;
  int64_t speculative = 1;  // K: 1 = plain head-0 decoding; 2 <= K <= n_future drafts with heads 1..K-1
  int64_t eos_id = -1;      // -1: none
  at::ScalarType dtype = at::kFloat;  // the compute dtype of the source's tensors (cache dtype)
  at::Device device = at::kCPU;
};

struct DecodeStats {
  int64_t forwards = 0;  // model forwards per sequence, the prompt's prefill included (a batch's counts per live row)
  int64_t tokens = 0;    // tokens emitted (EOS included)
  std::vector<int64_t> drafted, accepted;  // per head 1..K-1 (index k-1): drafts verified, drafts kept
  void add(const DecodeStats& o);
};

struct DecodeResult {
  std::vector<int64_t> tokens;  // generated tokens, without the EOS
  std::string finish_reason;    // "eos" | "stop" | "length"
};

// Called after each emitted token with all generated tokens so far: true ends the sequence ("stop").
using StopCheck = std::function<bool(const std::vector<int64_t>&)>;

// Speculative rejection rule for one draft token d drawn from q: accept with probability
// min(1, p[d]/q[d]); otherwise returns a token drawn from max(0, p - q) renormalised. Returns d when
// accepted. One uniform is used for the test and, on rejection, one for the draw.
int64_t accept_draft(const std::vector<double>& p, const std::vector<double>& q, int64_t d, TokenRng& rng,
                     bool* accepted);

// Generates after `prompt` (non-empty; ids < vocab). Runs under no-grad. Throws Error(Usage) for a
// K outside [1, n_future].
DecodeResult decode_sequence(const MtpModel& model, ParamSource& src, const std::vector<int64_t>& prompt,
                             const DecodeOptions& opt, TokenRng& rng, const StopCheck& stop = nullptr,
                             DecodeStats* stats = nullptr);

// Several sequences decoded together (one forward per step for the whole batch, prompts left-padded,
// DecodeCache::start): plain head-0 decoding only, each row with its own rng and stop check; a row
// that finished stays in the batch (its tokens ignored) until every row has. In fp32 each row's
// tokens are decode_sequence's (the padding is masked out; tested). Falls back to decode_sequence
// row by row for K > 1 (speculative rows accept different numbers of drafts), a batch of one, or
// when the longest prompt plus max_new_tokens exceeds max_seq_len. `stops` is empty or one per row.
std::vector<DecodeResult> decode_batch(const MtpModel& model, ParamSource& src,
                                       const std::vector<std::vector<int64_t>>& prompts, const DecodeOptions& opt,
                                       std::vector<TokenRng>& rngs, const std::vector<StopCheck>& stops = {},
                                       DecodeStats* stats = nullptr);

}  // namespace wmtp
