// generate: (prompt, sample) pairs decoded in rounds across ranks, one stream per pair, lines streamed in input order.
#include "eval/generate.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <fstream>
#include <sstream>

#include "comm/agree.h"
#include "comm/mpi_util.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/output_path.h"
#include "data/tokenizer.h"
#include "eval/option_checks.h"

namespace wmtp {

std::vector<Prompt> parse_prompts(const std::string& text, const std::string& source) {
  std::vector<Prompt> out;
  std::istringstream in(text);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json::Value v;
    try {
      v = json::parse(line);
    } catch (const Error& e) {
      throw_input(source, ":", n, ": ", e.what());
    }
    const json::Value* p = v.is_object() ? v.find("prompt") : nullptr;
    if (p == nullptr || !p->is_string()) throw_input(source, ":", n, ": no string \"prompt\"");
    const json::Value* id = v.find("id");
    if (id == nullptr) id = v.find("task_id");
    out.push_back({id ? *id : json::Value(static_cast<int64_t>(out.size())), p->as_string()});
  }
  if (out.empty()) throw_input(source, ": no prompts");
  return out;
}

std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stop) {
  size_t cut = text.size();
  for (const auto& s : stop)
    if (!s.empty()) cut = std::min(cut, text.find(s));
  return text.substr(0, cut);
}

namespace {
std::string decode_text(const Tokenizer& tok, const std::vector<int64_t>& ids) {
  return tok.decode(std::vector<int32_t>(ids.begin(), ids.end()));
}
}  // namespace

std::vector<int64_t> Generator::prompt_ids(const std::string& prompt) const {
  std::vector<int64_t> ids;
  if (add_bos) ids.push_back(tokenizer.bos_id());
  for (int32_t t : tokenizer.encode(prompt)) ids.push_back(t);
  return ids;
}

bool Generator::over_context(const std::vector<int64_t>& ids) const {
  return static_cast<int64_t>(ids.size()) >= model.model->args().max_seq_len;
}

Completion Generator::complete(const std::string& prompt, int64_t index, int64_t sample, DecodeStats* stats) const {
  return complete_all({prompt}, {{index, sample}}, stats).front();
}

std::vector<Completion> Generator::complete_all(const std::vector<std::string>& prompts, const std::vector<Key>& keys,
                                                DecodeStats* stats) const {
  WMTP_CHECK(prompts.size() == keys.size(), "complete_all: ", prompts.size(), " prompts, ", keys.size(), " keys");
  StopCheck check;
  if (!stop.empty())
    check = [this](const std::vector<int64_t>& out) {
      const std::string text = decode_text(tokenizer, out);
      return cut_at_stop(text, stop).size() < text.size();
    };
  const size_t batch = static_cast<size_t>(std::max<int64_t>(batch_size, 1));
  std::vector<Completion> out;
  for (size_t first = 0; first < prompts.size(); first += batch) {
    std::vector<std::vector<int64_t>> ids;
    std::vector<TokenRng> rngs;
    for (size_t i = first; i < std::min(first + batch, prompts.size()); ++i) {
      // A prompt's samples follow one another: encoded once.
      ids.push_back(i > first && keys[i].index == keys[i - 1].index ? ids.back() : prompt_ids(prompts[i]));
      rngs.push_back(stream_rng(seed, keys[i].index, keys[i].sample));
    }
    const std::vector<StopCheck> stops(ids.size(), check);
    for (DecodeResult& r : decode_batch(*model.model, *model.params, ids, decode, rngs, stops, stats))
      out.push_back({r.tokens, cut_at_stop(decode_text(tokenizer, r.tokens), stop), r.finish_reason});
  }
  return out;
}

std::vector<std::string> gather_round_robin(MPI_Comm comm, const std::vector<std::string>& mine, size_t n_items) {
  std::string packed;  // length-prefixed items
  for (const auto& m : mine) {
    const uint64_t n = m.size();
    packed.append(reinterpret_cast<const char*>(&n), sizeof n);
    packed += m;
  }
  const std::vector<std::string> parts = gather_bytes(comm, packed, 0);
  std::vector<std::string> out;
  if (comm_rank(comm) != 0) return out;
  const size_t world = parts.size();
  std::vector<size_t> pos(world, 0);
  for (size_t i = 0; i < n_items; ++i) {
    const std::string& p = parts[i % world];
    size_t& at = pos[i % world];
    uint64_t n = 0;
    WMTP_CHECK(at + sizeof n <= p.size(), "gather_round_robin: item ", i, " missing");
    std::memcpy(&n, p.data() + at, sizeof n);
    out.push_back(p.substr(at + sizeof n, n));
    at += sizeof n + n;
  }
  return out;
}

Generator make_generator(const GenerationModel& gm, const Tokenizer& tok, int64_t max_new_tokens,
                         SamplingConfig sampling, int64_t speculative, uint64_t seed, int64_t batch_size) {
  Generator gen{gm, tok, {}, {}, true, seed, batch_size};
  gen.decode.max_new_tokens = max_new_tokens;
  gen.decode.sampling = sampling;
  gen.decode.speculative = speculative;
  gen.decode.eos_id = tok.eos_id();
  gen.decode.vocab = tok.vocab_size();
  gen.decode.dtype = gm.dtype;
  gen.decode.device = gm.device;
  return gen;
}

DecodeStats empty_stats(int64_t speculative) {
  DecodeStats s;
  s.drafted.assign(static_cast<size_t>(std::max<int64_t>(speculative - 1, 0)), 0);
  s.accepted = s.drafted;
  return s;
}

DecodeStats sum_stats(MPI_Comm comm, const DecodeStats& s) {
  DecodeStats t;
  t.forwards = all_sum(comm, s.forwards);
  t.tokens = all_sum(comm, s.tokens);
  t.over_context = all_sum(comm, s.over_context);
  t.context_cut = all_sum(comm, s.context_cut);
  for (size_t k = 0; k < s.drafted.size(); ++k) {
    t.drafted.push_back(all_sum(comm, s.drafted[k]));
    t.accepted.push_back(all_sum(comm, s.accepted[k]));
  }
  return t;
}

OverContext count_over_context(MPI_Comm comm, const Generator& gen, const std::vector<std::string>& prompts) {
  const int rank = comm_rank(comm), world = comm_size(comm);
  OverContext mine;
  agreed(comm, [&] {
    for (size_t i = static_cast<size_t>(rank); i < prompts.size(); i += static_cast<size_t>(world)) {
      const std::vector<int64_t> ids = gen.prompt_ids(prompts[i]);
      if (!gen.over_context(ids)) continue;
      if (mine.count++ == 0) mine.first = static_cast<int64_t>(i), mine.first_tokens = static_cast<int64_t>(ids.size());
    }
  });
  OverContext all;
  all.count = all_sum(comm, mine.count);
  const std::vector<int64_t> firsts = all_gather(comm, {mine.first, mine.first_tokens});
  for (size_t r = 0; r + 1 < firsts.size(); r += 2)
    if (firsts[r] >= 0 && (all.first < 0 || firsts[r] < all.first))
      all.first = firsts[r], all.first_tokens = firsts[r + 1];
  return all;
}

void warn_over_context(MPI_Comm comm, const Logger& log, const Generator& gen, const OverContext& o, size_t total,
                       const std::string& what, const std::function<std::string(int64_t)>& name_of) {
  if (o.count == 0 || comm_rank(comm) != 0) return;
  log.warn(
      "%lld of %zu %s are longer than the model's context (max_seq_len %lld tokens, BOS included), the first "
      "%s (%lld tokens): their completions are empty (finish_reason \"length\")",
      static_cast<long long>(o.count), total, what.c_str(), static_cast<long long>(gen.model.model->args().max_seq_len),
      name_of(o.first).c_str(), static_cast<long long>(o.first_tokens));
}

namespace {

// The output line of one completion.
std::string completion_line(const json::Value& id, int64_t sample, const Completion& c) {
  json::Value line = json::Value::object();
  line.set("id", id);
  line.set("sample", sample);
  line.set("text", c.text);
  json::Value toks = json::Value::array();
  for (int64_t t : c.tokens) toks.push(t);
  line.set("tokens", std::move(toks));
  line.set("finish_reason", c.finish_reason);
  return json::dump(line) + "\n";
}

// Pairs per rank and round: a few batches, so that a round's gather is worth its synchronization.
constexpr int64_t kBatchesPerRound = 4;

}  // namespace

DecodeStats run_generate(const GenerateOptions& opt, MPI_Comm comm, const Logger& log) {
  check_generate_options(opt);
  on_rank0(comm, [&] { check_output_file(opt.output, "--output"); });
  const int rank = comm_rank(comm), world = comm_size(comm);
  const std::string text = bcast_string(comm, agreed(comm, [&] {
                                          if (rank != 0) return std::string();
                                          std::ifstream f(opt.prompts, std::ios::binary);
                                          if (!f) throw_input("cannot read --prompts '", opt.prompts, "'");
                                          std::ostringstream s;
                                          s << f.rdbuf();
                                          return s.str();
                                        }));
  const std::vector<Prompt> prompts = parse_prompts(text, opt.prompts);  // identical on every rank
  const int64_t n_prompts = static_cast<int64_t>(prompts.size());
  if (opt.num_samples > std::numeric_limits<int64_t>::max() / n_prompts)
    throw_usage("--num-samples ", opt.num_samples, " x ", n_prompts, " prompts: more completions than a 64-bit count");
  Tokenizer tok = agreed(comm, [&] { return Tokenizer::load(opt.tokenizer); });
  const std::vector<std::string> notes = agreed(comm, [&] {
    return check_generation_model(opt.checkpoint, opt.lora, tok, opt.max_new_tokens, opt.speculative);
  });
  for (const auto& note : notes) log.warn("%s", note.c_str());
  GenerationModel gm = agreed(comm,
                              [&] { return load_generation_model(opt.checkpoint, opt.lora, opt.dtype, opt.device); });
  if (gm.merged_lora > 0)
    log.info("merged LoRA adapters into %lld projections", static_cast<long long>(gm.merged_lora));

  Generator gen = make_generator(gm, tok, opt.max_new_tokens, {opt.temperature, opt.top_p}, opt.speculative, opt.seed,
                                 opt.batch_size);
  gen.stop = opt.stop;
  gen.add_bos = opt.add_bos;
  std::vector<std::string> texts;
  for (const Prompt& p : prompts) texts.push_back(p.text);
  warn_over_context(comm, log, gen, count_over_context(comm, gen, texts), prompts.size(), "prompts",
                    [&](int64_t i) { return json::dump(prompts[static_cast<size_t>(i)].id); });
  texts.clear();

  std::unique_ptr<DurableFile> out;  // rank 0: the output's temporary, named when complete
  on_rank0(comm, [&] { out = std::make_unique<DurableFile>(opt.output); });
  DecodeStats stats = empty_stats(opt.speculative);
  const int64_t pairs = n_prompts * opt.num_samples;
  const int64_t chunk = opt.batch_size > std::numeric_limits<int64_t>::max() / kBatchesPerRound
                            ? opt.batch_size
                            : opt.batch_size * kBatchesPerRound;
  for (int64_t round = 0; round < pairs;) {
    // This rank's pairs of the round: [lo, hi) of the global order, the ranks' ranges in rank order.
    const int64_t left = pairs - round, even = left / world + (left % world != 0 ? 1 : 0);
    const int64_t per_rank = std::min(chunk, even);
    const int64_t lo = std::min(pairs, round + rank * per_rank), hi = std::min(pairs, lo + per_rank);
    round = per_rank == even ? pairs : round + per_rank * world;
    const std::string lines = agreed(comm, [&] {
      std::vector<std::string> batch_texts;
      std::vector<Generator::Key> keys;
      for (int64_t g = lo; g < hi; ++g) {
        const int64_t i = g / opt.num_samples;
        batch_texts.push_back(prompts[static_cast<size_t>(i)].text);
        keys.push_back({i, g % opt.num_samples});
      }
      const std::vector<Completion> done = gen.complete_all(batch_texts, keys, &stats);
      std::string mine;
      for (size_t j = 0; j < done.size(); ++j)
        mine += completion_line(prompts[static_cast<size_t>(keys[j].index)].id, keys[j].sample, done[j]);
      return mine;
    });
    const std::vector<std::string> parts = gather_bytes(comm, lines, 0);  // rank order = input order
    on_rank0(comm, [&] {
      for (const std::string& part : parts) out->write(part);
    });
  }
  on_rank0(comm, [&] { out->commit(); });
  const DecodeStats total = sum_stats(comm, stats);
  if (rank == 0 && total.context_cut > 0)
    log.warn("%lld completion(s) stopped at the model's context (max_seq_len %lld) before --max-new-tokens",
             static_cast<long long>(total.context_cut), static_cast<long long>(gm.model->args().max_seq_len));
  return total;
}

}  // namespace wmtp
