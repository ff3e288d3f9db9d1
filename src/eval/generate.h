// generate: prompts JSONL -> completions JSONL, split across ranks and streamed. The (prompt, sample)
// pairs in input order are decoded in rounds: each rank takes the next `chunk` pairs of the round in
// rank order, each pair from its own random stream (sampling.h), and rank 0 appends the round's
// lines to the output's temporary file; the file gets its name when the last round is written
// (atomic: an interrupted run leaves no output). Memory per rank is bounded by the chunk whatever
// the counts, and the file is the same at any rank count and batch size.
//
// Input lines: {"prompt": "...", "id": <any JSON>} ("task_id" is accepted for the id; the line's
// 0-based index when neither is there). Output lines: {"id", "sample", "text", "tokens",
// "finish_reason"} with finish_reason "eos" | "stop" | "length"; the text ends before the first stop
// sequence and never holds the EOS.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/log.h"
#include "eval/decoder.h"
#include "eval/load_model.h"

namespace wmtp {

class Tokenizer;

struct GenerateOptions {
  std::string prompts, output, checkpoint, lora, tokenizer;
  std::string dtype = "fp32", device = "cpu";
  int64_t max_new_tokens = 512;
  int64_t num_samples = 1;
  int64_t speculative = 1;
  int64_t batch_size = 8;    // sequences decoded together (decode_batch), plain or speculative
  double temperature = 0.0;  // the spec's default for evaluation is 0.2; generate defaults to greedy
  double top_p = 0.95;
  uint64_t seed = 42;
  std::vector<std::string> stop;
  bool add_bos = true;
};

struct Prompt {
  json::Value id;
  std::string text;
};

// One prompt per non-empty line. Throws Error(Input) naming the file and line.
std::vector<Prompt> parse_prompts(const std::string& text, const std::string& source);

struct Completion {
  std::vector<int64_t> tokens;
  std::string text, finish_reason;
};

// Everything one decode needs besides the prompt: the model, tokenizer and decoding options.
struct Generator {
  const GenerationModel& model;
  const Tokenizer& tokenizer;
  DecodeOptions decode;
  std::vector<std::string> stop;
  bool add_bos = true;
  uint64_t seed = 42;
  int64_t batch_size = 1;

  // The ids a prompt is decoded from: BOS (when add_bos) + its tokens.
  std::vector<int64_t> prompt_ids(const std::string& prompt) const;
  // Whether those ids leave no room for a new token in the model's context (an empty completion).
  bool over_context(const std::vector<int64_t>& ids) const;
  // Sample `sample` of prompt number `index` (its position in the input: it keys the random stream).
  Completion complete(const std::string& prompt, int64_t index, int64_t sample, DecodeStats* stats) const;
  // complete() for every (prompts[i], keys[i]), decoded batch_size at a time (decode_batch): in fp32
  // the same completions whatever the batch size.
  struct Key {
    int64_t index, sample;
  };
  std::vector<Completion> complete_all(const std::vector<std::string>& prompts, const std::vector<Key>& keys,
                                       DecodeStats* stats) const;
};

// A Generator for `gm`: the tokenizer's EOS, the model's dtype and device, BOS added.
Generator make_generator(const GenerationModel& gm, const Tokenizer& tok, int64_t max_new_tokens,
                         SamplingConfig sampling, int64_t speculative, uint64_t seed, int64_t batch_size = 1);

// Zeroed statistics for K = `speculative`, sized alike on every rank (sum_stats is collective).
DecodeStats empty_stats(int64_t speculative);
// Every rank's statistics summed. Collective.
DecodeStats sum_stats(MPI_Comm comm, const DecodeStats& s);

// The prompts (indices rank, rank + world, ... checked here, the counts summed) whose ids leave no
// room in the model's context: how many, and the first (-1: none). Collective.
struct OverContext {
  int64_t count = 0, first = -1, first_tokens = 0;
};
OverContext count_over_context(MPI_Comm comm, const Generator& gen, const std::vector<std::string>& prompts);
// One warning on rank 0 when any is over the context: "3 of 60 <what> are longer than ..., the first
// <name_of(first)> (N tokens): ... empty". Collective only in that every rank calls it.
void warn_over_context(MPI_Comm comm, const Logger& log, const Generator& gen, const OverContext& o, size_t total,
                       const std::string& what, const std::function<std::string(int64_t)>& name_of);

// The text up to the first occurrence of any stop sequence (all of it when none occurs).
std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stop);

// Items i = rank, rank + world, ... (this rank's, in order) from every rank, returned on rank 0 in
// global order 0 .. n_items-1 (empty elsewhere). Collective.
std::vector<std::string> gather_round_robin(MPI_Comm comm, const std::vector<std::string>& mine, size_t n_items);

// The whole program: reads, generates in rounds, streams the lines to the output on rank 0; returns
// the decode statistics summed over ranks. Collective over `comm`.
DecodeStats run_generate(const GenerateOptions& opt, MPI_Comm comm, const Logger& log);

}  // namespace wmtp
