// Dataset reader: metadata at open, then hyperslab reads of just the requested samples' tokens.
#include "data/dataset.h"

#include <algorithm>
#include <type_traits>

#include "core/check.h"
#include "core/error.h"
#include "core/h5.h"
#include "data/dataset_format.h"

namespace wmtp {

namespace {

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    size_t nl = s.find('\n', start);
    out.push_back(s.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

std::vector<std::string> read_string_column(hid_t loc, const std::string& name, const std::string& file) {
  std::vector<uint8_t> chars = h5::read_column<uint8_t>(loc, name);
  std::vector<int64_t> offs = h5::read_column<int64_t>(loc, name + dsformat::kOffsetsSuffix);
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < offs.size(); ++i) {
    if (offs[i] < 0 || offs[i] > offs[i + 1] || offs[i + 1] > static_cast<int64_t>(chars.size()))
      throw_input(file, ": string column '", name, "' has bad offsets at row ", i);
    out.emplace_back(reinterpret_cast<const char*>(chars.data()) + offs[i], offs[i + 1] - offs[i]);
  }
  return out;
}

// One root attribute of DatasetHeader::visit_attrs, as preprocess-metadata wrote it.
void read_info_attr(hid_t f, const char* name, int64_t& v) { v = h5::read_attr_int(f, name); }
void read_info_attr(hid_t f, const char* name, bool& v) { v = h5::read_attr_int(f, name) != 0; }
void read_info_attr(hid_t f, const char* name, std::string& v) { v = h5::read_attr_string(f, name); }
void read_info_attr(hid_t f, const char* name, std::vector<std::string>& v) {
  v = split_lines(h5::read_attr_string(f, name));
}

void check_offsets(const std::vector<int64_t>& offs, int64_t n, int64_t total, const std::string& what,
                   const std::string& file) {
  if (static_cast<int64_t>(offs.size()) != n + 1 || offs.front() != 0 || offs.back() != total)
    throw_input(file, ": ", what, " do not span [0, ", total, "] in ", n, " rows");
  for (int64_t i = 0; i < n; ++i)
    if (offs[i] > offs[i + 1]) throw_input(file, ": ", what, " decrease at row ", i);
}

}  // namespace

Dataset Dataset::open(const std::string& path) {
  Dataset d;
  d.file_ = h5::open_file_read(path);
  const hid_t f = d.file_;
  DatasetHeader& info = d.meta_.header;
  info.path = path;
  if (!h5::has_attr(f, dsformat::kFormatAttr) || h5::read_attr_string(f, dsformat::kFormatAttr) != dsformat::kFormat)
    throw_input(path, ": not a wmtp dataset (no ", dsformat::kFormatAttr, "=\"", dsformat::kFormat,
                "\" attribute); make it with preprocess-metadata");
  info.version = h5::read_attr_int(f, dsformat::kVersionAttr);
  if (info.version < 1 || info.version > dsformat::kVersion)
    throw_input(path, ": dataset version ", info.version, " is not supported (this build reads 1..", dsformat::kVersion,
                ")");
  DatasetHeader::visit_attrs(info, [&](const char* k, auto& v) { read_info_attr(f, k, v); });

  if (!h5::exists(f, dsformat::kSamples) || !h5::exists(f, dsformat::kProblems))
    throw_input(path, ": groups /samples and /problems are required");
  H5Handle s(WMTP_H5_CHECK(H5Gopen2(f, dsformat::kSamples, H5P_DEFAULT)));
  SampleTable& t = d.meta_.samples;
  namespace col = dsformat::sample;
  t.offsets = h5::read_column<int64_t>(s, col::kOffsets);
  t.prompt_length = h5::read_column<int32_t>(s, col::kPromptLength);
  t.length = h5::read_column<int32_t>(s, col::kLength);
  t.is_correct = h5::read_column<uint8_t>(s, col::kIsCorrect);
  t.difficulty = h5::read_column<int32_t>(s, col::kDifficulty);
  t.problem = h5::read_column<int32_t>(s, col::kProblem);

  H5Handle p(WMTP_H5_CHECK(H5Gopen2(f, dsformat::kProblems, H5P_DEFAULT)));
  ProblemIndex& pi = d.meta_.problems;
  namespace pcol = dsformat::problem;
  pi.ids = read_string_column(p, pcol::kId, path);
  pi.difficulty = h5::read_column<int32_t>(p, pcol::kDifficulty);
  pi.correct_offsets = h5::read_column<int64_t>(p, pcol::kCorrectOffsets);
  pi.incorrect_offsets = h5::read_column<int64_t>(p, pcol::kIncorrectOffsets);
  pi.correct = h5::read_column<int64_t>(p, pcol::kCorrect);
  pi.incorrect = h5::read_column<int64_t>(p, pcol::kIncorrect);
  pi.correct_lengths = h5::read_column<int32_t>(p, pcol::kCorrectLengths);
  pi.incorrect_lengths = h5::read_column<int32_t>(p, pcol::kIncorrectLengths);

  d.tokens_ = H5Handle(WMTP_H5_CHECK(H5Dopen2(f, dsformat::kTokens, H5P_DEFAULT)));

  // Consistency: a truncated or hand-edited file must fail here, not as garbage batches later.
  const int64_t n = info.n_samples;
  if (h5::column_length(f, dsformat::kTokens) != info.n_tokens)
    throw_input(path, ": /tokens has ", h5::column_length(f, dsformat::kTokens), " ids, header says ", info.n_tokens);
  for (const auto* col : {&t.prompt_length, &t.length, &t.difficulty, &t.problem})
    if (static_cast<int64_t>(col->size()) != n) throw_input(path, ": a /samples column does not have ", n, " rows");
  if (static_cast<int64_t>(t.is_correct.size()) != n)
    throw_input(path, ": /samples/is_correct does not have ", n, " rows");
  check_offsets(t.offsets, n, info.n_tokens, "/samples/offsets", path);
  const int64_t P = pi.size();
  if (static_cast<int64_t>(pi.difficulty.size()) != P)
    throw_input(path, ": /problems/difficulty does not have ", P, " rows");
  for (int64_t i = 0; i < n; ++i) {
    if (t.length[i] != t.offsets[i + 1] - t.offsets[i] || t.prompt_length[i] < 1 || t.prompt_length[i] > t.length[i])
      throw_input(path, ": sample ", i, " has inconsistent lengths");
    if (t.problem[i] < 0 || t.problem[i] >= P)
      throw_input(path, ": sample ", i, " has problem row ", t.problem[i], " of ", P);
  }
  check_offsets(pi.correct_offsets, P, static_cast<int64_t>(pi.correct.size()), "/problems/correct_offsets", path);
  check_offsets(pi.incorrect_offsets, P, static_cast<int64_t>(pi.incorrect.size()), "/problems/incorrect_offsets",
                path);
  if (pi.correct_lengths.size() != pi.correct.size() || pi.incorrect_lengths.size() != pi.incorrect.size())
    throw_input(path, ": /problems length lists differ from the index lists");
  for (int64_t p2 = 0; p2 < P; ++p2) {
    for (int64_t k = pi.correct_offsets[p2]; k < pi.correct_offsets[p2 + 1]; ++k)
      if (pi.correct[k] < 0 || pi.correct[k] >= n || t.problem[pi.correct[k]] != p2 || !t.is_correct[pi.correct[k]])
        throw_input(path, ": /problems/correct row ", k, " does not name a correct sample of problem ", p2);
    for (int64_t k = pi.incorrect_offsets[p2]; k < pi.incorrect_offsets[p2 + 1]; ++k)
      if (pi.incorrect[k] < 0 || pi.incorrect[k] >= n || t.problem[pi.incorrect[k]] != p2 ||
          t.is_correct[pi.incorrect[k]])
        throw_input(path, ": /problems/incorrect row ", k, " does not name an incorrect sample of problem ", p2);
  }
  if (static_cast<int64_t>(pi.correct.size() + pi.incorrect.size()) != n)
    throw_input(path, ": the problem index lists ", pi.correct.size() + pi.incorrect.size(), " samples, not ", n);
  return d;
}

void Dataset::check_index(int64_t index) const {
  if (index < 0 || index >= size()) throw_usage(path(), ": sample ", index, " out of range [0, ", size(), ")");
}

std::vector<TokenizedSample> Dataset::read(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices) check_index(i);
  std::vector<int64_t> order(indices);
  std::sort(order.begin(), order.end());
  order.erase(std::unique(order.begin(), order.end()), order.end());
  const SampleTable& t = meta_.samples;

  // Merge adjacent token ranges, then select their union in one dataspace.
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end) in /tokens
  for (int64_t i : order) {
    const int64_t b = t.offsets[i], e = t.offsets[i + 1];
    if (!ranges.empty() && ranges.back().second == b) ranges.back().second = e;
    else
      ranges.emplace_back(b, e);
  }
  int64_t total = 0;
  for (auto& r : ranges) total += r.second - r.first;
  std::vector<int32_t> buf(static_cast<size_t>(total));
  if (total > 0) {
    H5Handle fspace(WMTP_H5_CHECK(H5Dget_space(tokens_)));
    bool first = true;
    for (auto& r : ranges) {
      if (r.second == r.first) continue;
      hsize_t start[1] = {static_cast<hsize_t>(r.first)}, cnt[1] = {static_cast<hsize_t>(r.second - r.first)};
      WMTP_H5_CHECK(H5Sselect_hyperslab(fspace, first ? H5S_SELECT_SET : H5S_SELECT_OR, start, nullptr, cnt, nullptr));
      first = false;
    }
    hsize_t mdims[1] = {static_cast<hsize_t>(total)};
    H5Handle mspace(WMTP_H5_CHECK(H5Screate_simple(1, mdims, nullptr)));
    if (H5Dread(tokens_, H5T_NATIVE_INT32, mspace, fspace, H5P_DEFAULT, buf.data()) < 0)
      throw_input(path(), ": cannot read /tokens (corrupt or truncated file)");
    tokens_read_ += total;
  }

  // Selected elements arrive in file order, i.e. in ascending sample order.
  std::vector<TokenizedSample> unique(order.size());
  int64_t at = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t i = order[k];
    TokenizedSample& s = unique[k];
    s.index = i;
    s.tokens.assign(buf.begin() + at, buf.begin() + at + t.length[i]);
    at += t.length[i];
    // An id without a row in the embedding would stop the run deep inside LibTorch ("index out of
    // range in self"); the header's vocab_size is what the trainer sized the model for.
    for (int32_t id : s.tokens)
      if (id < 0 || id >= meta_.header.vocab_size)
        throw_input(path(), ": sample ", i, " holds token id ", id, ", outside the dataset's vocabulary of ",
                    meta_.header.vocab_size,
                    " ids (vocab_size attribute; corrupt file, or tokenized with another model)");
    s.prompt_length = t.prompt_length[i];
    s.is_correct = t.is_correct[i] != 0;
  }
  std::vector<TokenizedSample> out;
  out.reserve(indices.size());
  for (int64_t i : indices) {
    auto it = std::lower_bound(order.begin(), order.end(), i);
    out.push_back(unique[static_cast<size_t>(it - order.begin())]);
  }
  return out;
}

std::string Dataset::read_string_row(const std::string& column, int64_t index) const {
  check_index(index);
  H5Handle s(WMTP_H5_CHECK(H5Gopen2(file_, dsformat::kSamples, H5P_DEFAULT)));
  int64_t be[2];
  h5::read_rows_raw(s, column + dsformat::kOffsetsSuffix, H5T_NATIVE_INT64, index, 2, be);
  if (be[0] < 0 || be[1] < be[0]) throw_input(path(), ": bad offsets in string column ", column);
  std::string out(static_cast<size_t>(be[1] - be[0]), '\0');
  h5::read_rows_raw(s, column, H5T_NATIVE_UINT8, be[0], be[1] - be[0], out.data());
  return out;
}

std::string Dataset::task_id(int64_t index) const { return read_string_row(dsformat::sample::kTaskId, index); }
std::string Dataset::metadata_json(int64_t index) const {
  return read_string_row(dsformat::sample::kMetadataJson, index);
}

DatasetStats Dataset::stats() const {
  H5Handle g(WMTP_H5_CHECK(H5Gopen2(file_, dsformat::kStats, H5P_DEFAULT)));
  DatasetStats st;
  DatasetStats::visit_counts(st, [&](const char* k, int64_t& v) { v = h5::read_attr_int(g, k); });
  DatasetStats::visit_lengths(st, [&](const std::string& p, LengthSummary& s) {
    LengthSummary::visit(s, [&](const char* k, auto& v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) v = h5::read_attr_double(g, p + "_" + k);
      else
        v = h5::read_attr_int(g, p + "_" + k);
    });
  });
  st.difficulty_values = h5::read_attr_ints(g, DatasetStats::kDifficultyValues);
  st.difficulty_counts = h5::read_attr_ints(g, DatasetStats::kDifficultyCounts);
  return st;
}

void check_validation_dataset(const Dataset& train, const Dataset& valid, int64_t model_vocab) {
  if (valid.header().vocab_size > model_vocab)
    throw_usage("[data] valid ", valid.path(), " was tokenized with ", valid.header().vocab_size,
                " ids, more than the model's vocabulary of ", model_vocab, " (from [data] train ", train.path(), ")");
  if (valid.header().tokenizer_fingerprint != train.header().tokenizer_fingerprint)
    throw_usage("[data] valid ", valid.path(), " was tokenized with another tokenizer (",
                valid.header().tokenizer_fingerprint, ", ", valid.header().tokenizer_path, ") than [data] train ",
                train.path(), " (", train.header().tokenizer_fingerprint, ", ", train.header().tokenizer_path, ")");
}

}  // namespace wmtp
