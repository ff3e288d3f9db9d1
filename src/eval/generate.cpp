// generate: prompts split across ranks, one stream per (prompt, sample), lines gathered in input order.
#include "eval/generate.h"

#include <algorithm>
#include <cstring>
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
      ids.emplace_back();
      if (add_bos) ids.back().push_back(tokenizer.bos_id());
      for (int32_t t : tokenizer.encode(prompts[i])) ids.back().push_back(t);
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

Generator make_generator(const GenerationModel& gm, const Tokenizer& tok, int64_t max_new_tokens, SamplingConfig sampling,
                         int64_t speculative, uint64_t seed, int64_t batch_size) {
  Generator gen{gm, tok, {}, {}, true, seed, batch_size};
  gen.decode.max_new_tokens = max_new_tokens;
  gen.decode.sampling = sampling;
  gen.decode.speculative = speculative;
  gen.decode.eos_id = tok.eos_id();
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
  for (size_t k = 0; k < s.drafted.size(); ++k) {
    t.drafted.push_back(all_sum(comm, s.drafted[k]));
    t.accepted.push_back(all_sum(comm, s.accepted[k]));
  }
  return t;
}

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
  Tokenizer tok = agreed(comm, [&] { return Tokenizer::load(opt.tokenizer); });
  const std::vector<std::string> notes = agreed(comm, [&] {
    return check_generation_model(opt.checkpoint, opt.lora, tok, opt.max_new_tokens, opt.speculative);
  });
  for (const auto& note : notes) log.warn("%s", note.c_str());
  GenerationModel gm = agreed(comm, [&] { return load_generation_model(opt.checkpoint, opt.lora, opt.dtype, opt.device); });
  if (gm.merged_lora > 0) log.info("merged LoRA adapters into %lld projections", static_cast<long long>(gm.merged_lora));

  Generator gen = make_generator(gm, tok, opt.max_new_tokens, {opt.temperature, opt.top_p}, opt.speculative, opt.seed,
                                 opt.batch_size);
  gen.stop = opt.stop;
  gen.add_bos = opt.add_bos;
  DecodeStats stats = empty_stats(opt.speculative);
  std::vector<std::string> mine;  // this rank's prompts' lines, sample by sample
  agreed(comm, [&] {
    std::vector<std::string> texts;  // this rank's (prompt, sample) pairs, in order, decoded in batches
    std::vector<Generator::Key> keys;
    for (size_t i = static_cast<size_t>(rank); i < prompts.size(); i += static_cast<size_t>(world))
      for (int64_t s = 0; s < opt.num_samples; ++s) {
        texts.push_back(prompts[i].text);
        keys.push_back({static_cast<int64_t>(i), s});
      }
    const std::vector<Completion> done = gen.complete_all(texts, keys, &stats);
    size_t next = 0;
    for (size_t i = static_cast<size_t>(rank); i < prompts.size(); i += static_cast<size_t>(world)) {
      std::string lines;
      for (int64_t s = 0; s < opt.num_samples; ++s) {
        const Completion& c = done[next++];
        json::Value line = json::Value::object();
        line.set("id", prompts[i].id);
        line.set("sample", s);
        line.set("text", c.text);
        json::Value toks = json::Value::array();
        for (int64_t t : c.tokens) toks.push(t);
        line.set("tokens", std::move(toks));
        line.set("finish_reason", c.finish_reason);
        lines += json::dump(line) + "\n";
      }
      mine.push_back(std::move(lines));
    }
  });
  const std::vector<std::string> all = gather_round_robin(comm, mine, prompts.size());
  on_rank0(comm, [&] {
    std::string out;
    for (const auto& lines : all) out += lines;
    write_file_atomically(opt.output, out);
  });
  return sum_stats(comm, stats);
}

}  // namespace wmtp
