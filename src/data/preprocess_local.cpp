// One rank's share of preprocess-metadata: parse, check and tokenise its lines. Bad lines are
// recorded, not thrown, so that all ranks can agree on them before anyone stops.
#include "data/preprocess_shard.h"

#include <algorithm>

#include "core/error.h"
#include "data/alpaca.h"
#include "data/preprocess.h"
#include "data/sample_record.h"
#include "data/tokenizer.h"

namespace wmtp {

namespace {

void add_sample(LocalShard& sh, const SampleRecord& r, EncodedSample& enc, int file, int64_t line_in_part) {
  sh.tokens.insert(sh.tokens.end(), enc.tokens.begin(), enc.tokens.end());
  sh.token_ends.push_back(static_cast<int64_t>(sh.tokens.size()));
  sh.prompt_length.push_back(enc.prompt_length);
  sh.length.push_back(static_cast<int32_t>(enc.tokens.size()));
  sh.difficulty.push_back(r.difficulty);
  sh.source_file.push_back(file);
  sh.is_correct.push_back(r.is_correct ? 1 : 0);
  sh.line_in_part.push_back(line_in_part);
  sh.task_id_chars += r.task_id;
  sh.task_id_ends.push_back(static_cast<int64_t>(sh.task_id_chars.size()));
  sh.metadata_chars += r.metadata_json;
  sh.metadata_ends.push_back(static_cast<int64_t>(sh.metadata_chars.size()));
  auto [it, inserted] = sh.problem_rows.emplace(r.problem_id, static_cast<int32_t>(sh.problem_ids.size()));
  if (inserted) {
    sh.problem_ids.push_back(r.problem_id);
    sh.problem_difficulty.push_back(r.difficulty);
  }
  sh.problem.push_back(it->second);
}

}  // namespace

LocalShard tokenize_rank_lines(const std::vector<InputFile>& files, ByteRange range, const Tokenizer& tok,
                               const PreprocessOptions& opt) {
  LocalShard sh;
  JsonlRangeReader reader(files, range);
  std::string line;
  int file = 0;
  int64_t line_in_part = 0;
  const bool truncate = opt.on_overlength == "truncate";
  AlpacaEncoder encoder(tok, opt.append_eos);
  while (reader.next(line, file, line_in_part)) {
    ++sh.n_lines;
    SampleRecord rec;
    try {
      rec = parse_sample_record(line);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Input) throw;
      if (static_cast<int64_t>(sh.bad.size()) < std::max<int64_t>(1, opt.report_bad_lines)) sh.bad.push_back({file, line_in_part, e.what()});
      ++sh.n_bad;
      continue;
    }
    EncodedSample enc = encoder.encode(rec.instruction, rec.input, rec.output);
    if (!enc.prompt_is_prefix) ++sh.n_prompt_not_prefix;
    if (opt.max_length > 0 && static_cast<int64_t>(enc.tokens.size()) > opt.max_length) {
      if (!truncate) {
        ++sh.n_dropped_overlength;
        continue;
      }
      if (enc.prompt_length >= opt.max_length) {  // nothing of the solution would remain to train on
        ++sh.n_dropped_prompt_too_long;
        continue;
      }
      enc.tokens.resize(static_cast<size_t>(opt.max_length));
      ++sh.n_truncated;
    }
    add_sample(sh, rec, enc, file, line_in_part);
  }
  sh.lines_per_file = reader.lines_per_file();
  return sh;
}

}  // namespace wmtp
