// Decoding with the KV cache: plain head-0 decoding, or self-speculative decoding with the MTP heads
// (--speculative K): heads 1..K-1 draft the K-1 tokens after head 0's, one forward of the trunk +
// every head over [last token, drafts] verifies them against head 0, the longest agreeing prefix is
// kept and the caches are rolled back past it. Greedy drafts are kept while they equal head 0's
// argmax, so the output is head-0 greedy decoding's; sampled drafts go through the speculative
// rejection rule (accept_draft), so the output distribution is head-0 sampling's.
//
// Sequences are decoded in batches (one forward per step for the batch): every row keeps its own
// cache length and positions (kv_cache.h), accepts its own number of drafts, draws from its own
// stream and leaves the batch when it ends. A row's tokens do not depend on the other rows: in fp32
// they are those of decoding it alone (tested), whatever the batch size and K.
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
  // Ids the tokenizer can decode (0: every id of the model). A model may carry a padded vocabulary
  // (rows past the tokenizer's, as trainers allow): ids >= vocab are never drafted nor sampled, and
  // the acceptance rule compares distributions over the first `vocab` ids only.
  int64_t vocab = 0;
  at::ScalarType dtype = at::kFloat;  // the compute dtype of the source's tensors (cache dtype)
  at::Device device = at::kCPU;
};

struct DecodeStats {
  int64_t forwards = 0;  // model forwards per sequence, the prompt's prefill included (a batch's counts per live row)
  int64_t tokens = 0;    // tokens emitted (EOS included)
  std::vector<int64_t> drafted, accepted;  // per head 1..K-1 (index k-1): drafts verified, drafts kept
  // Sequences the model's context (max_seq_len) ended: a prompt of max_seq_len tokens or more
  // (nothing generated), and completions stopped by it before max_new_tokens. Both end "length".
  int64_t over_context = 0, context_cut = 0;
  void add(const DecodeStats& o);
};

struct DecodeResult {
  std::vector<int64_t> tokens;  // generated tokens, without the EOS
  std::string finish_reason;    // "eos" | "stop" | "length"
};

// Called after each emitted token with all generated tokens so far: true ends the sequence ("stop").
using StopCheck = std::function<bool(const std::vector<int64_t>&)>;

// Speculative rejection rule for one draft token d drawn from q: accept with probability
// min(1, p[d]/q[d]); otherwise returns a token drawn from max(0, p - q) renormalized. Returns d when
// accepted. One uniform is used for the test and, on rejection, one for the draw.
int64_t accept_draft(const std::vector<double>& p, const std::vector<double>& q, int64_t d, TokenRng& rng,
                     bool* accepted);

// Sequences generated after `prompts` (each non-empty; ids < vocab), decoded together, row b with
// its own stream rngs[b] and stop check stops[b] (`stops` empty or one per row). Runs under no-grad.
// Throws Error(Usage) for a K outside [1, n_future]. A prompt of max_seq_len tokens or more gets an
// empty completion (DecodeStats::over_context).
std::vector<DecodeResult> decode_batch(const MtpModel& model, ParamSource& src,
                                       const std::vector<std::vector<int64_t>>& prompts, const DecodeOptions& opt,
                                       std::vector<TokenRng>& rngs, const std::vector<StopCheck>& stops = {},
                                       DecodeStats* stats = nullptr);

// decode_batch of one sequence.
DecodeResult decode_sequence(const MtpModel& model, ParamSource& src, const std::vector<int64_t>& prompt,
                             const DecodeOptions& opt, TokenRng& rng, const StopCheck& stop = nullptr,
                             DecodeStats* stats = nullptr);

}  // namespace wmtp
