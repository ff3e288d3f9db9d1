// preprocess-metadata's collective flow: check inputs and tokenizer (agreed), tokenize each rank's
// lines, agree on bad lines, merge problem tables on rank 0, compute statistics, write the file in
// parallel under <output>.tmp (comm/collective_file.h: a full disk is one agreed error, the .tmp
// removed) and commit it by fsync + rename.
//
// Why parallel HDF5 for the write rather than gathering to rank 0: the token array is the bulk of the
// data (CodeContests: billions of ids) and would not fit in one process; each rank already holds a
// contiguous block of the output rows, so it writes its hyperslab collectively. Only the problem
// table (O(problems)) and a few bytes per sample for the problem index and the statistics go to rank 0.
#include "data/preprocess.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <unordered_map>

#include "core/check.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/h5.h"
#include "core/json.h"
#include "core/output_path.h"
#include "core/progress.h"
#include "core/timer.h"
#include "data/dataset_format.h"
#include "data/dataset_metadata.h"
#include "data/preprocess_shard.h"
#include "data/sample_record.h"
#include "data/tokenizer.h"
#include "comm/agree.h"
#include "comm/collective_file.h"

namespace wmtp {

void PreprocessOptions::validate() const {
  if (inputs.empty()) throw_usage("--input is required (one or more JSONL files)");
  if (tokenizer.empty()) throw_usage("--tokenizer is required (a SentencePiece .model file)");
  if (output.empty()) throw_usage("--output is required (the .h5 file to write)");
  if (max_length < 0) throw_usage("--max-length must be >= 0 (0 = no limit), got ", max_length);
  if (on_overlength != "drop" && on_overlength != "truncate")
    throw_usage("--on-overlength must be 'drop' or 'truncate', got '", on_overlength, "'");
  if (report_bad_lines < 0) throw_usage("--report-bad-lines must be >= 0");
  for (const auto& in : inputs)
    if (std::filesystem::weakly_canonical(in) == std::filesystem::weakly_canonical(output))
      throw_usage("--output ", output, " is also an input");
}

namespace {

// Line numbers: rank r's first line of file f is 1 + the lines of f read by ranks < r.
std::vector<int64_t> first_line_numbers(MPI_Comm comm, const LocalShard& sh) {
  const int rank = comm_rank(comm);
  const size_t F = sh.lines_per_file.size();
  std::vector<int64_t> all = all_gather(comm, sh.lines_per_file);
  std::vector<int64_t> first(F, 1);
  for (int r = 0; r < rank; ++r)
    for (size_t f = 0; f < F; ++f) first[f] += all[r * F + f];
  return first;
}

// Bad lines: counted everywhere; named (first few, input order) in the error or the warnings.
void handle_bad_lines(MPI_Comm comm, const LocalShard& sh, const std::vector<InputFile>& files,
                      const std::vector<int64_t>& first_line, const PreprocessOptions& opt, const Logger& log) {
  const int64_t total_bad = all_sum(comm, sh.n_bad);
  if (total_bad == 0) return;
  json::Value mine = json::Value::array();
  for (const auto& b : sh.bad)
    mine.push(files[b.file].path + ":" + std::to_string(first_line[b.file] + b.line_in_part) + ": " + b.problem);
  std::vector<std::string> parts = gather_bytes(comm, json::dump(mine), 0);
  std::string text;
  if (comm_rank(comm) == 0) {
    std::vector<std::string> named;
    for (const auto& p : parts) {
      const json::Value list = json::parse(p);  // keep it alive: the loop walks its array
      for (const auto& m : list.as_array())
        if (static_cast<int64_t>(named.size()) < std::max<int64_t>(1, opt.report_bad_lines))
          named.push_back(m.as_string());
    }
    if (opt.skip_bad_lines) {
      log.warn("skipping %lld bad input line(s); the first %zu:", static_cast<long long>(total_bad), named.size());
      for (const auto& n : named) log.warn("  %s", n.c_str());
      return;
    }
    text = "bad input: " + named.front();
    if (total_bad > 1) {
      text += "\n  (" + std::to_string(total_bad) + " bad lines in all; --skip-bad-lines skips and counts them)";
      for (size_t i = 1; i < named.size(); ++i) text += "\n  " + named[i];
    }
  }
  if (opt.skip_bad_lines) return;
  throw_input_agreed(bcast_string(comm, text, 0));
}

// Rank 0 merges the ranks' problem tables in rank (= input) order; each rank learns the global row
// of each of its local problems.
struct MergedProblems {
  std::vector<int32_t> global_row_of_local;  // this rank
  std::vector<std::string> ids;              // rank 0 only
  std::vector<int32_t> difficulty;           // rank 0 only
};

MergedProblems merge_problems(MPI_Comm comm, const LocalShard& sh) {
  json::Value mine = json::Value::object();
  json::Value ids = json::Value::array(), diff = json::Value::array();
  for (size_t p = 0; p < sh.problem_ids.size(); ++p) {
    ids.push(sh.problem_ids[p]);
    diff.push(static_cast<int64_t>(sh.problem_difficulty[p]));
  }
  mine.set("ids", std::move(ids)).set("difficulty", std::move(diff));
  std::vector<std::string> parts = gather_bytes(comm, json::dump(mine), 0);
  MergedProblems out;
  std::vector<std::string> maps;
  if (comm_rank(comm) == 0) {
    std::unordered_map<std::string, int32_t> rows;
    for (const auto& part : parts) {
      json::Value t = json::parse(part);
      const auto& tid = t.at("ids").as_array();
      const auto& tdiff = t.at("difficulty").as_array();
      std::vector<int32_t> map(tid.size());
      for (size_t i = 0; i < tid.size(); ++i) {
        auto [it, inserted] = rows.emplace(tid[i].as_string(), static_cast<int32_t>(out.ids.size()));
        if (inserted) {
          out.ids.push_back(tid[i].as_string());
          out.difficulty.push_back(static_cast<int32_t>(tdiff[i].as_int()));
        }
        map[i] = it->second;
      }
      maps.emplace_back(reinterpret_cast<const char*>(map.data()), map.size() * sizeof(int32_t));
    }
  }
  std::string my_map = scatter_bytes(comm, maps, 0);
  out.global_row_of_local.resize(my_map.size() / sizeof(int32_t));
  std::memcpy(out.global_row_of_local.data(), my_map.data(), my_map.size());
  return out;
}

// One column through the file's failure protocol: room for it, the dataset, this rank's rows: each a
// step the ranks agree on before the next, so a full disk or an I/O error that hits some ranks only
// ends every rank together (comm/collective_file.h) instead of leaving the others in a collective.
template <class T>
void write_column(CollectiveFile& f, hid_t loc, const std::string& name, const std::vector<T>& local, int64_t offset,
                  int64_t total) {
  f.reserve(total * static_cast<int64_t>(sizeof(T)) + (4 << 10));
  H5Handle d;
  f.run([&] { d = h5::create_column(loc, name, h5::native_type<T>(), total); });
  f.run([&] { h5::write_rows(d, local, offset); });
}

// An offsets column (n_rows + 1 entries): rank 0 writes the leading 0, each rank its rows' ends past `base`.
void write_offsets_column(CollectiveFile& f, hid_t loc, const std::string& name, const std::vector<int64_t>& local_ends,
                          int64_t base, int64_t n_rows, int64_t row_offset, bool first_rank) {
  std::vector<int64_t> offs;
  if (first_rank) offs.push_back(0);
  for (int64_t e : local_ends) offs.push_back(base + e);
  write_column(f, loc, name, offs, first_rank ? 0 : row_offset + 1, n_rows + 1);
}

void write_string_column(CollectiveFile& f, hid_t loc, const std::string& name, const std::string& chars,
                         const std::vector<int64_t>& local_ends, int64_t n_total, int64_t row_offset, MPI_Comm comm,
                         bool first_rank) {
  int64_t total_chars = 0;
  const int64_t char_base = exclusive_sum(comm, static_cast<int64_t>(chars.size()), &total_chars);
  std::vector<uint8_t> bytes(chars.begin(), chars.end());
  write_column(f, loc, name, bytes, char_base, total_chars);
  write_offsets_column(f, loc, name + dsformat::kOffsetsSuffix, local_ends, char_base, n_total, row_offset, first_rank);
}

// One root attribute of DatasetHeader::visit_attrs (Dataset::open reads them back the same way).
void write_info_attr(hid_t f, const char* name, int64_t v) { h5::write_attr(f, name, v); }
void write_info_attr(hid_t f, const char* name, bool v) { h5::write_attr(f, name, static_cast<int64_t>(v)); }
void write_info_attr(hid_t f, const char* name, const std::string& v) { h5::write_attr(f, name, v); }
void write_info_attr(hid_t f, const char* name, const std::vector<std::string>& v) {
  std::string lines;
  for (const auto& s : v) lines += (lines.empty() ? "" : "\n") + s;
  h5::write_attr(f, name, lines);
}

void write_root_attrs(hid_t f, const Tokenizer& tok, const PreprocessOptions& opt, const DatasetStats& st) {
  DatasetHeader info;
  info.n_samples = st.n_samples;
  info.n_tokens = st.n_tokens;
  info.vocab_size = tok.vocab_size();
  info.bos_id = tok.bos_id();
  info.eos_id = tok.eos_id();
  info.pad_id = tok.pad_id();
  info.unk_id = tok.unk_id();
  info.tokenizer_path = tok.path();
  info.tokenizer_fingerprint = tok.fingerprint();
  info.prompt_template = "alpaca";
  info.append_eos = opt.append_eos;
  info.max_length = opt.max_length;
  info.on_overlength = opt.on_overlength;
  info.source_files = opt.inputs;
  h5::write_attr(f, dsformat::kFormatAttr, std::string(dsformat::kFormat));
  h5::write_attr(f, dsformat::kVersionAttr, static_cast<int64_t>(dsformat::kVersion));
  DatasetHeader::visit_attrs(info, [&](const char* k, const auto& v) { write_info_attr(f, k, v); });
  h5::write_attr(f, dsformat::kCreatedByAttr, std::string("preprocess-metadata wmtp " WMTP_VERSION));
}

void write_stats_group(CollectiveFile& f, const DatasetStats& st) {
  f.reserve(16 << 10);
  f.run([&] {
    H5Handle g = h5::require_group(f.id(), dsformat::kStats);
    DatasetStats::visit_counts(st, [&](const char* k, int64_t v) { h5::write_attr(g, k, v); });
    DatasetStats::visit_lengths(st, [&](const std::string& p, const LengthSummary& s) {
      LengthSummary::visit(s, [&](const char* k, auto v) { h5::write_attr(g, p + "_" + k, v); });
    });
    h5::write_attr(g, DatasetStats::kDifficultyValues, st.difficulty_values);
    h5::write_attr(g, DatasetStats::kDifficultyCounts, st.difficulty_counts);
  });
}

// Where this rank's rows go in the sample and token columns, and the columns' lengths.
struct RowPlacement {
  int64_t sample_offset = 0, n_samples = 0, token_offset = 0, n_tokens = 0;
};

// No rows at all is an agreed input error that says where the lines went.
RowPlacement place_rows(MPI_Comm comm, const LocalShard& sh, const PreprocessOptions& opt) {
  RowPlacement rows;
  rows.sample_offset = exclusive_sum(comm, sh.size(), &rows.n_samples);
  rows.token_offset = exclusive_sum(comm, static_cast<int64_t>(sh.tokens.size()), &rows.n_tokens);
  if (rows.n_samples == 0) {
    std::string names;
    for (const auto& in : opt.inputs) names += (names.empty() ? "" : ", ") + in;
    throw_input_agreed("no samples left in ", names, " (", all_sum(comm, sh.n_lines), " lines, ",
                       all_sum(comm, sh.n_bad), " bad, ",
                       all_sum(comm, sh.n_dropped_overlength + sh.n_dropped_prompt_too_long), " over --max-length ",
                       opt.max_length, ")");
  }
  return rows;
}

// Rank 0 gets every sample's few bytes of metadata and builds the problem index from them.
DatasetMetadata gather_metadata(MPI_Comm comm, const LocalShard& sh, const std::vector<int32_t>& problem,
                                MergedProblems&& merged) {
  DatasetMetadata meta;  // rank 0 only
  meta.samples.problem = gather_concat(comm, problem, 0);
  meta.samples.is_correct = gather_concat(comm, sh.is_correct, 0);
  meta.samples.difficulty = gather_concat(comm, sh.difficulty, 0);
  meta.samples.length = gather_concat(comm, sh.length, 0);
  meta.samples.prompt_length = gather_concat(comm, sh.prompt_length, 0);
  if (comm_rank(comm) != 0) return meta;
  meta.problems.ids = std::move(merged.ids);
  meta.problems.difficulty = std::move(merged.difficulty);
  std::vector<int32_t> sol(meta.samples.length.size());
  for (size_t i = 0; i < sol.size(); ++i) sol[i] = meta.samples.length[i] - meta.samples.prompt_length[i];
  build_problem_lists(meta.problems, meta.samples.problem, meta.samples.is_correct, sol);
  meta.samples.offsets.assign(1, 0);
  for (int32_t len : meta.samples.length) meta.samples.offsets.push_back(meta.samples.offsets.back() + len);
  return meta;
}

// The input counts summed over the ranks, the content statistics from rank 0's metadata; the same on every rank.
DatasetStats agree_statistics(MPI_Comm comm, const LocalShard& sh, const DatasetMetadata& meta,
                              const RowPlacement& rows) {
  DatasetStats stats;
  stats.n_lines = all_sum(comm, sh.n_lines);
  stats.n_bad_lines = all_sum(comm, sh.n_bad);
  stats.n_dropped_overlength = all_sum(comm, sh.n_dropped_overlength);
  stats.n_truncated = all_sum(comm, sh.n_truncated);
  stats.n_dropped_prompt_too_long = all_sum(comm, sh.n_dropped_prompt_too_long);
  stats.n_prompt_not_prefix = all_sum(comm, sh.n_prompt_not_prefix);
  if (comm_rank(comm) == 0) {
    for (size_t i = 0; i < meta.samples.difficulty.size(); ++i)
      stats.n_difficulty_conflicts += meta.samples.difficulty[i] != meta.problems.difficulty[meta.samples.problem[i]];
    compute_content_stats(stats, meta);
  }
  stats = DatasetStats::from_json(bcast_string(comm, stats.to_json(), 0));
  WMTP_CHECK(stats.n_samples == rows.n_samples && stats.n_tokens == rows.n_tokens, "rank 0's statistics disagree");
  return stats;
}

// The samples group: each rank writes its rows.
void write_sample_columns(CollectiveFile& f, MPI_Comm comm, const LocalShard& sh, const RowPlacement& rows,
                          const std::vector<int32_t>& problem, const std::vector<int64_t>& first_line) {
  std::vector<int64_t> source_line(sh.line_in_part.size());
  for (size_t i = 0; i < source_line.size(); ++i) source_line[i] = first_line[sh.source_file[i]] + sh.line_in_part[i];
  const bool first_rank = comm_rank(comm) == 0;
  const int64_t at = rows.sample_offset, n = rows.n_samples;
  H5Handle s;
  f.run([&] { s = h5::require_group(f.id(), dsformat::kSamples); });
  namespace col = dsformat::sample;
  write_offsets_column(f, s, col::kOffsets, sh.token_ends, rows.token_offset, n, at, first_rank);
  write_column(f, s, col::kPromptLength, sh.prompt_length, at, n);
  write_column(f, s, col::kLength, sh.length, at, n);
  write_column(f, s, col::kIsCorrect, sh.is_correct, at, n);
  write_column(f, s, col::kDifficulty, sh.difficulty, at, n);
  write_column(f, s, col::kProblem, problem, at, n);
  write_column(f, s, col::kSourceFile, sh.source_file, at, n);
  write_column(f, s, col::kSourceLine, source_line, at, n);
  write_string_column(f, s, col::kTaskId, sh.task_id_chars, sh.task_id_ends, n, at, comm, first_rank);
  write_string_column(f, s, col::kMetadataJson, sh.metadata_chars, sh.metadata_ends, n, at, comm, first_rank);
  f.run([&] { h5::write_attr(s, col::kDifficultyMissingValue, static_cast<int64_t>(kNoDifficulty)); });
}

// The problem index is rank 0's: the other ranks join the collective writes with no rows.
void write_problem_columns(CollectiveFile& f, MPI_Comm comm, const ProblemIndex& pi, const DatasetStats& stats) {
  H5Handle p;
  f.run([&] { p = h5::require_group(f.id(), dsformat::kProblems); });
  const int64_t P = stats.n_problems;
  std::string id_chars;
  std::vector<int64_t> id_ends;
  for (const auto& id : pi.ids) id_ends.push_back(static_cast<int64_t>((id_chars += id).size()));
  namespace pcol = dsformat::problem;
  write_string_column(f, p, pcol::kId, id_chars, id_ends, P, 0, comm, comm_rank(comm) == 0);
  write_column(f, p, pcol::kDifficulty, pi.difficulty, 0, P);
  write_column(f, p, pcol::kCorrectOffsets, pi.correct_offsets, 0, P + 1);
  write_column(f, p, pcol::kIncorrectOffsets, pi.incorrect_offsets, 0, P + 1);
  write_column(f, p, pcol::kCorrect, pi.correct, 0, stats.n_correct);
  write_column(f, p, pcol::kIncorrect, pi.incorrect, 0, stats.n_incorrect);
  write_column(f, p, pcol::kCorrectLengths, pi.correct_lengths, 0, stats.n_correct);
  write_column(f, p, pcol::kIncorrectLengths, pi.incorrect_lengths, 0, stats.n_incorrect);
}

}  // namespace

PreprocessResult preprocess_dataset(MPI_Comm comm, const PreprocessOptions& opt, const Logger& log) {
  Timer timer;
  opt.validate();

  // 1. Inputs and tokenizer: every rank checks; the first failure is everyone's error.
  std::vector<InputFile> files = agreed(comm, [&] { return stat_input_files(opt.inputs); });
  on_rank0(comm, [&] { check_output_file(opt.output, "--output"); });  // before any work: exit 2
  std::optional<Tokenizer> tok;
  agreed(comm, [&] {
    tok.emplace(Tokenizer::load(opt.tokenizer));
    return 0;
  });

  // 2. This rank's lines.
  const ByteRange range = rank_byte_range(files, comm_rank(comm), comm_size(comm));
  Progress progress(log, "tokenizing (rank 0's share of the input)", range.end - range.begin, Progress::Unit::Bytes);
  const LocalShard sh = tokenize_rank_lines(files, range, *tok, opt, &progress);
  progress.finish();
  const std::vector<int64_t> first_line = first_line_numbers(comm, sh);
  handle_bad_lines(comm, sh, files, first_line, opt, log);
  if (const int64_t n = all_sum(comm, sh.n_dropped_untokenized); n > 0)
    log.info(
        "%lld sample(s) dropped without tokenizing them: their text has more bytes than --max-length %lld "
        "tokens of at most %d bytes can hold",
        (long long)n, (long long)opt.max_length, tok->max_token_bytes());
  const RowPlacement rows = place_rows(comm, sh, opt);

  // 3. Problems: global rows, in order of first appearance.
  MergedProblems merged = merge_problems(comm, sh);
  std::vector<int32_t> problem(sh.problem.size());
  for (size_t i = 0; i < problem.size(); ++i) problem[i] = merged.global_row_of_local[sh.problem[i]];

  // 4. Rank 0: problem index and statistics from a few bytes per sample.
  const DatasetMetadata meta = gather_metadata(comm, sh, problem, std::move(merged));
  const DatasetStats stats = agree_statistics(comm, sh, meta, rows);

  // 5. Write <output>.tmp collectively. A failure on any rank (a full disk, found by the space
  //    reservation before each column, or an I/O error) is agreed: every rank abandons the file
  //    together (removed) and throws the same Error(Runtime) naming it and the free space.
  const std::string tmp = opt.output + ".tmp";
  on_rank0(comm, [&] {
    auto parent = std::filesystem::path(opt.output).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
  });
  {
    CollectiveFile f(tmp, comm);
    f.reserve(64 << 10);
    f.run([&] { write_root_attrs(f.id(), *tok, opt, stats); });
    write_column(f, f.id(), dsformat::kTokens, sh.tokens, rows.token_offset, rows.n_tokens);
    write_sample_columns(f, comm, sh, rows, problem, first_line);
    write_problem_columns(f, comm, meta.problems, stats);
    write_stats_group(f, stats);
    f.close();  // flush (MPI_File_sync) and close, agreed: the file is complete on disk after this
  }

  // 6. Commit: durable bytes, then an atomic rename, then a durable directory entry.
  on_rank0(comm, [&] {
    try {
      commit_file(tmp, opt.output);
    } catch (...) {
      std::remove(tmp.c_str());
      throw;
    }
  });
  return {stats, timer.seconds()};
}

}  // namespace wmtp
