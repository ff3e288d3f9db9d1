// One rank's share of preprocess-metadata: parse, check and tokenize its lines. Bad lines are
// recorded, not thrown, so that all ranks can agree on them before anyone stops.
#include "data/preprocess_shard.h"

#include <algorithm>

#include "core/error.h"
#include "core/progress.h"
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

// --on-overlength truncate keeps the first max_length ids. They cover at most max_length *
// max_token_bytes bytes of the text, so the output is cut at the first whitespace after twice that
// many bytes: SentencePiece never merges across a whitespace boundary, so the ids before the cut are
// those of the whole text. (A text with no whitespace in that range is tokenized whole.)
void limit_output_bytes(std::string& output, int64_t prompt_bytes, const Tokenizer& tok, int64_t max_length) {
  const int64_t keep = 2 * max_length * int64_t(tok.max_token_bytes()) - prompt_bytes;
  if (keep <= 0 || int64_t(output.size()) <= keep) return;
  const size_t cut = output.find_first_of(" \t\n\r", size_t(keep));
  if (cut != std::string::npos) output.resize(cut);
}

}  // namespace

LocalShard tokenize_rank_lines(const std::vector<InputFile>& files, ByteRange range, const Tokenizer& tok,
                               const PreprocessOptions& opt, Progress* progress) {
  LocalShard sh;
  JsonlRangeReader reader(files, range);
  std::string line;
  int file = 0;
  int64_t line_in_part = 0;
  const bool truncate = opt.on_overlength == "truncate";
  AlpacaEncoder encoder(tok, opt.append_eos);
  while (reader.next(line, file, line_in_part)) {
    ++sh.n_lines;
    if (progress) progress->update(reader.bytes_read());
    SampleRecord rec;
    try {
      rec = parse_sample_record(line);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Input) throw;
      if (static_cast<int64_t>(sh.bad.size()) < std::max<int64_t>(1, opt.report_bad_lines))
        sh.bad.push_back({file, line_in_part, e.what()});
      ++sh.n_bad;
      continue;
    }
    // A text that cannot fit in max_length tokens is not tokenized at all: one 50 MB line would
    // otherwise cost minutes and gigabytes only to be dropped (tokenizer.h: min_tokens).
    if (opt.max_length > 0 && tok.max_token_bytes() > 0) {
      const int64_t prompt_bytes = int64_t(format_alpaca_prompt(rec.instruction, rec.input).size());
      const int64_t min_prompt = 1 + tok.min_tokens(prompt_bytes);  // BOS
      const int64_t min_total = 1 + tok.min_tokens(prompt_bytes + int64_t(rec.output.size())) +
                                (opt.append_eos ? 1 : 0);
      if (min_total > opt.max_length && (!truncate || min_prompt >= opt.max_length)) {
        ++(truncate ? sh.n_dropped_prompt_too_long : sh.n_dropped_overlength);
        ++sh.n_dropped_untokenized;
        continue;
      }
      if (truncate) limit_output_bytes(rec.output, prompt_bytes, tok, opt.max_length);
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
