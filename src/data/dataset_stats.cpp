// Dataset statistics: computation, JSON round trip (to broadcast rank 0's figures), summary text.
#include "data/dataset_stats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <type_traits>

#include "core/json.h"
#include "data/dataset_metadata.h"
#include "data/sample_record.h"

namespace wmtp {

LengthSummary summarize_lengths(std::vector<int32_t> v) {
  LengthSummary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  auto pct = [&](double p) {
    int64_t rank = static_cast<int64_t>(std::ceil(p / 100.0 * n));
    return static_cast<int64_t>(v[static_cast<size_t>(std::clamp<int64_t>(rank, 1, v.size()) - 1)]);
  };
  s.min = v.front();
  s.max = v.back();
  s.p50 = pct(50);
  s.p90 = pct(90);
  s.p99 = pct(99);
  double sum = 0;
  for (int32_t x : v) sum += x;
  s.mean = sum / n;
  return s;
}

void compute_content_stats(DatasetStats& st, const DatasetMetadata& meta) {
  const SampleTable& t = meta.samples;
  const ProblemIndex& pi = meta.problems;
  st.n_samples = t.size();
  st.n_correct = std::count(t.is_correct.begin(), t.is_correct.end(), uint8_t{1});
  st.n_incorrect = st.n_samples - st.n_correct;
  st.n_tokens = t.offsets.empty() ? 0 : t.offsets.back();
  st.n_problems = pi.size();
  st.n_valid_problems = 0;
  st.total_possible_pairs = 0;
  for (int64_t p = 0; p < pi.size(); ++p) {
    if (pi.n_correct(p) > 0 && pi.n_incorrect(p) > 0) ++st.n_valid_problems;
    st.total_possible_pairs += std::min(pi.n_correct(p), pi.n_incorrect(p));
  }
  std::map<int32_t, int64_t> hist;
  st.n_no_difficulty = 0;
  std::vector<int32_t> sol(t.length.size());
  for (int64_t i = 0; i < t.size(); ++i) {
    if (t.difficulty[i] == kNoDifficulty) ++st.n_no_difficulty;
    else
      ++hist[t.difficulty[i]];
    sol[i] = t.solution_length(i);
  }
  st.difficulty_values.clear();
  st.difficulty_counts.clear();
  for (auto [d, c] : hist) {
    st.difficulty_values.push_back(d);
    st.difficulty_counts.push_back(c);
  }
  st.length = summarize_lengths(t.length);
  st.prompt_length = summarize_lengths(t.prompt_length);
  st.solution_length = summarize_lengths(std::move(sol));
}

namespace {
json::Value summary_json(const LengthSummary& s) {
  json::Value o = json::Value::object();
  LengthSummary::visit(s, [&](const char* k, auto v) { o.set(k, v); });
  return o;
}
LengthSummary summary_from(const json::Value& o) {
  LengthSummary s;
  LengthSummary::visit(s, [&](const char* k, auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) v = o.at(k).as_double();
    else
      v = o.at(k).as_int();
  });
  return s;
}
json::Value ints_json(const std::vector<int64_t>& v) {
  json::Value a = json::Value::array();
  for (int64_t x : v) a.push(x);
  return a;
}
std::vector<int64_t> ints_from(const json::Value& a) {
  std::vector<int64_t> v;
  for (const auto& x : a.as_array()) v.push_back(x.as_int());
  return v;
}
}  // namespace

std::string DatasetStats::to_json() const {
  json::Value o = json::Value::object();
  visit_counts(*this, [&](const char* k, int64_t v) { o.set(k, v); });
  visit_lengths(*this, [&](const char* k, const LengthSummary& s) { o.set(k, summary_json(s)); });
  o.set(kDifficultyValues, ints_json(difficulty_values));
  o.set(kDifficultyCounts, ints_json(difficulty_counts));
  return json::dump(o);
}

DatasetStats DatasetStats::from_json(const std::string& text) {
  json::Value o = json::parse(text);
  DatasetStats s;
  visit_counts(s, [&](const char* k, int64_t& v) { v = o.at(k).as_int(); });
  visit_lengths(s, [&](const char* k, LengthSummary& l) { l = summary_from(o.at(k)); });
  s.difficulty_values = ints_from(o.at(kDifficultyValues));
  s.difficulty_counts = ints_from(o.at(kDifficultyCounts));
  return s;
}

std::string DatasetStats::describe() const {
  std::ostringstream os;
  auto lens = [&](const char* name, const LengthSummary& s) {
    os << "  " << name << ": min " << s.min << ", p50 " << s.p50 << ", p90 " << s.p90 << ", p99 " << s.p99 << ", max "
       << s.max << ", mean " << static_cast<int64_t>(std::llround(s.mean)) << "\n";
  };
  os << "  lines " << n_lines << ", bad lines skipped " << n_bad_lines << "; samples " << n_samples << " (" << n_correct
     << " correct, " << n_incorrect << " incorrect), tokens " << n_tokens << "\n";
  os << "  dropped: over max_length " << n_dropped_overlength << ", prompt too long " << n_dropped_prompt_too_long
     << "; truncated " << n_truncated << "; prompt/solution BPE merges " << n_prompt_not_prefix << "\n";
  os << "  problems " << n_problems << " (" << n_valid_problems << " with correct and incorrect), possible pairs "
     << total_possible_pairs << "\n";
  lens("length (tokens)", length);
  lens("prompt length", prompt_length);
  lens("solution length", solution_length);
  os << "  difficulty:";
  for (size_t i = 0; i < difficulty_values.size(); ++i)
    os << " " << difficulty_values[i] << ":" << difficulty_counts[i];
  os << (n_no_difficulty ? " none:" + std::to_string(n_no_difficulty) : std::string()) << "\n";
  if (n_difficulty_conflicts)
    os << "  warning: " << n_difficulty_conflicts << " samples disagree with their problem's first difficulty\n";
  return os.str();
}

}  // namespace wmtp
