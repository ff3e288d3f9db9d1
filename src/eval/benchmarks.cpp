// Benchmark tasks, prompts and scoring by weighted_mtp's rules (docs/parity.md).
#include "eval/benchmarks.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "data/alpaca.h"
#include "data/py_random.h"
#include "eval/generate.h"
#include "eval/sandbox.h"

namespace wmtp {

namespace {
constexpr int64_t kTaskCap = 100;
constexpr int64_t kMaxIoTests = 10;
const char* kCodeContestsPrefix = "Write a Python solution that reads from stdin and prints to stdout.\n\n";

std::string str_field(const json::Value& v, const char* key) {
  const json::Value* f = v.find(key);
  return f && f->is_string() ? f->as_string() : std::string();
}

// A field that must be there, a string.
const std::string& required_str(const json::Value& row, const char* key) {
  const json::Value* f = row.is_object() ? row.find(key) : nullptr;
  if (f == nullptr) throw_input("no \"", key, "\"");
  if (!f->is_string()) throw_input("\"", key, "\" must be a string");
  return f->as_string();
}

// A field that must be a string when present ("" when absent): a value of another type is refused,
// not read as "".
std::string optional_str(const json::Value& row, const char* key) {
  const json::Value* f = row.find(key);
  if (f == nullptr) return "";
  if (!f->is_string()) throw_input("\"", key, "\" must be a string");
  return f->as_string();
}

// A non-empty array of strings.
std::vector<std::string> string_list(const json::Value& row, const char* key) {
  const json::Value* f = row.find(key);
  if (f == nullptr) throw_input("no \"", key, "\"");
  const json::Value& a = *f;
  if (!a.is_array() || a.as_array().empty())
    throw_input("\"", key, "\" must be a non-empty list of strings (a task without tests would pass any completion)");
  std::vector<std::string> out;
  for (const auto& e : a.as_array()) {
    if (!e.is_string()) throw_input("\"", key, "\" must hold strings only");
    out.push_back(e.as_string());
  }
  return out;
}

// Python's str.strip() for ASCII whitespace.
std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A tests field, absent or {"input": [str...], "output": [str...]} of one length; anything else is
// refused rather than read as fewer tests.
void add_io_tests(const json::Value& row, const char* key, std::vector<std::pair<std::string, std::string>>& out) {
  const json::Value* t = row.find(key);
  if (!t) return;
  const json::Value* in = t->is_object() ? t->find("input") : nullptr;
  const json::Value* exp = t->is_object() ? t->find("output") : nullptr;
  if (!in || !exp || !in->is_array() || !exp->is_array() || in->as_array().size() != exp->as_array().size())
    throw_input("\"", key, "\" must be {\"input\": [...], \"output\": [...]} with one output per input");
  for (size_t i = 0; i < in->as_array().size(); ++i) {
    const json::Value &a = in->as_array()[i], &b = exp->as_array()[i];
    if (!a.is_string() || !b.is_string())
      throw_input("\"", key, "\" test ", i + 1, ": input and output must be strings");
    out.emplace_back(a.as_string(), b.as_string());
  }
}

// A pass is the tests running to their end, not an exit status: a program that exits with 0 before
// its asserts (sys.exit(0), os._exit(0), exit() in the completion) must not pass. So the program's
// last line writes a random token of this run straight to descriptor 1 (past whatever the completion
// did to sys.stdout), and a pass needs exit 0 and that line. A completion cannot print it by chance;
// one that reads its own source file to find it cheats deliberately, which no harness running the
// tests in the completion's process can prevent.
std::string end_token() {
  std::random_device rd;
  char hex[33];
  snprintf(hex, sizeof hex, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return std::string("wmtp-tests-ran-") + hex;
}
std::string tests_ran_line(const std::string& token) {
  return "__import__('sys').stdout.flush(); __import__('os').write(1, b'\\n" + token + "\\n')\n";
}

BenchTask make_task(const std::string& bench, const json::Value& row, int64_t index) {
  BenchTask t;
  t.id = str_field(row, "task_id");
  if (const json::Value* id = row.find("task_id"); id && id->is_int()) t.id = std::to_string(id->as_int());
  if (bench == "humaneval") {
    t.prompt = t.code_prompt = required_str(row, "prompt");
    t.test = required_str(row, "test");
    t.entry_point = required_str(row, "entry_point");
  } else if (bench == "mbpp") {
    t.prompt = format_alpaca_prompt(required_str(row, "text"), "");
    t.setup = optional_str(row, "test_setup_code");
    t.asserts = string_list(row, "test_list");
  } else if (bench == "codecontests") {
    if (t.id.empty()) t.id = str_field(row, "name");
    t.prompt = format_alpaca_prompt(kCodeContestsPrefix + required_str(row, "description"), "");
    std::vector<std::pair<std::string, std::string>> all;
    for (const char* k : {"public_tests", "private_tests", "generated_tests"}) add_io_tests(row, k, all);
    if (static_cast<int64_t>(all.size()) > kMaxIoTests) {
      for (int64_t i : py_sample_indices(42, static_cast<int64_t>(all.size()), kMaxIoTests))
        t.io_tests.push_back(all[static_cast<size_t>(i)]);
    } else {
      t.io_tests = std::move(all);
    }
  } else if (bench == "gsm8k") {
    t.prompt = format_alpaca_prompt(required_str(row, "question"), "");
    t.answer = required_str(row, "answer");
    double v = 0;
    std::string why;  // read now, not while scoring: a bad reference is this line's error
    if (!extract_gsm8k_number(t.answer, &v, &why)) throw_input("\"answer\": ", why);
  } else {
    throw_usage("--benchmark must be humaneval, mbpp, codecontests or gsm8k, got '", bench, "'");
  }
  if (t.id.empty()) t.id = std::to_string(index);
  return t;
}
}  // namespace

std::vector<int64_t> py_sample_indices(uint64_t seed, int64_t n, int64_t k) {
  WMTP_CHECK(k >= 0 && k <= n, "sample larger than the population");
  PyRandom rng(seed);
  std::vector<int64_t> out;
  int64_t setsize = 21;
  if (k > 5)
    setsize += static_cast<int64_t>(std::pow(4.0, std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0))));
  if (n <= setsize) {  // CPython's pool branch
    std::vector<int64_t> pool(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pool[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < k; ++i) {
      const auto j = static_cast<size_t>(rng.randbelow(static_cast<uint64_t>(n - i)));
      out.push_back(pool[j]);
      pool[j] = pool[static_cast<size_t>(n - i - 1)];
    }
  } else {  // the set branch
    std::set<int64_t> seen;
    for (int64_t i = 0; i < k; ++i) {
      int64_t j = static_cast<int64_t>(rng.randbelow(static_cast<uint64_t>(n)));
      while (seen.count(j)) j = static_cast<int64_t>(rng.randbelow(static_cast<uint64_t>(n)));
      seen.insert(j);
      out.push_back(j);
    }
  }
  return out;
}

int64_t default_num_samples(const std::string& benchmark) { return benchmark == "codecontests" ? 10 : 100; }

std::vector<BenchTask> load_benchmark(const std::string& benchmark, const std::string& path, int64_t max_tasks) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_input("cannot read benchmark file '", path, "'");
  std::vector<std::pair<json::Value, int64_t>> rows;  // each with its line number
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (strip(line).empty()) continue;
    try {
      rows.emplace_back(json::parse(line), n);
    } catch (const Error& e) {
      throw_input(path, ":", n, ": ", e.what());
    }
  }
  if (rows.empty()) throw_input(path, ": no tasks");
  // Every row is checked, the ones the subset leaves out too: a file with a bad row is refused
  // whatever --max-tasks is.
  std::vector<BenchTask> all;
  for (size_t i = 0; i < rows.size(); ++i) {
    try {
      all.push_back(make_task(benchmark, rows[i].first, static_cast<int64_t>(i)));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Usage) throw;
      throw_input(path, ":", rows[i].second, ": ", e.what());
    }
  }
  std::vector<int64_t> pick;
  if (static_cast<int64_t>(all.size()) > kTaskCap) {
    pick = py_sample_indices(42, static_cast<int64_t>(all.size()), kTaskCap);
  } else {
    for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) pick.push_back(i);
  }
  if (max_tasks > 0 && max_tasks < static_cast<int64_t>(pick.size())) pick.resize(static_cast<size_t>(max_tasks));
  std::vector<BenchTask> tasks;
  for (int64_t i : pick) tasks.push_back(std::move(all[static_cast<size_t>(i)]));
  return tasks;
}

std::string strip_markdown_fences(const std::string& text) {
  const size_t open = text.find("```");
  if (open == std::string::npos) return text;
  const size_t body = text.find('\n', open);
  if (body == std::string::npos) return "";
  const size_t close = text.find("```", body + 1);
  return text.substr(body + 1, close == std::string::npos ? std::string::npos : close - body - 1);
}

std::string clean_humaneval_completion(const std::string& completion, const std::string& prompt) {
  static const std::vector<std::string> kStops = {"\nclass ", "\ndef ",    "\n#",      "\nif __name__",
                                                  "\nprint(", "\nassert ", "\n\"\"\"", "\n'''"};
  std::string c = cut_at_stop(strip_markdown_fences(completion), kStops);
  std::smatch m;
  static const std::regex kDef(R"(def\s+([A-Za-z_][A-Za-z0-9_]*)\s*\()");
  if (std::regex_search(prompt, m, kDef)) {
    const std::regex again("(^|\n)[ \t]*def[ \t]+" + m[1].str() + "[ \t]*\\([^\n]*:[ \t]*(?=\n|$)");
    c = std::regex_replace(c, again, "$1", std::regex_constants::format_first_only);
  }
  while (!c.empty()) {  // trailing blank lines
    const size_t nl = c.find_last_of('\n');
    const std::string last = nl == std::string::npos ? c : c.substr(nl + 1);
    if (!strip(last).empty()) break;
    c.erase(nl == std::string::npos ? 0 : nl);
  }
  return c;
}

namespace {
// The number the rule picked as a double; false (and why) when it lies outside a double's range
// (a degenerate completion writes hundreds of digits). A tiny one underflows to about 0, which is
// the value to within the comparison's 1e-6.
bool parse_number(const std::string& digits, double* out, std::string* why) {
  const double v = std::strtod(digits.c_str(), nullptr);
  if (std::isfinite(v)) {
    *out = v;
    return true;
  }
  if (why)
    *why = "its number (" + std::to_string(digits.size()) + " characters: " + digits.substr(0, 20) +
           (digits.size() > 20 ? "..." : "") + ") lies outside a double's range";
  return false;
}
}  // namespace

bool extract_gsm8k_number(const std::string& text_in, double* out, std::string* why) {
  std::string text = text_in;
  const size_t resp = text.find("### Response:");
  if (resp != std::string::npos) text = text.substr(resp + 13);
  text.erase(std::remove(text.begin(), text.end(), ','), text.end());
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  static const std::regex kNum(R"(-?\d+(?:\.\d+)?)");
  std::smatch m;
  for (const char* cue : {"####", "the answer is", "answer:", "answer =", "therefore", "= $"}) {
    const size_t at = lower.find(cue);
    if (at == std::string::npos) continue;
    const std::string after = text.substr(at + std::char_traits<char>::length(cue));
    if (std::regex_search(after, m, kNum)) return parse_number(m[0].str(), out, why);
  }
  std::string last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kNum); it != std::sregex_iterator(); ++it)
    last = (*it)[0].str();
  if (!last.empty()) return parse_number(last, out, why);
  if (why) *why = "no number in it";
  return false;
}

Score score_completion(const std::string& benchmark, const BenchTask& task, const std::string& completion,
                       const Sandbox& box, const std::string& python) {
  Score s;
  if (benchmark == "gsm8k") {
    double got = 0.0, want = 0.0;
    std::string why;
    if (!extract_gsm8k_number(task.answer, &want, &why)) throw_input("task ", task.id, ": \"answer\": ", why);
    const bool read = extract_gsm8k_number(completion, &got, &why);
    s.pass = read && std::fabs(got - want) < 1e-6;
    s.detail = s.pass ? "correct" : read ? "wrong answer" : "wrong answer: " + why;
    s.partial = s.pass ? 1.0 : 0.0;
    return s;
  }
  std::string program;
  if (benchmark == "humaneval") {
    program = task.code_prompt + clean_humaneval_completion(completion, task.code_prompt) + "\n\n" + task.test +
              "\n\ncheck(" + task.entry_point + ")\n";
  } else if (benchmark == "mbpp") {
    program = task.setup + "\n" + strip_markdown_fences(completion) + "\n";
    for (const auto& a : task.asserts) program += a + "\n";
  }
  if (!program.empty()) {
    const std::string token = end_token();
    program += tests_ran_line(token);
    SandboxResult r = box.run({python, "solution.py"}, {{"solution.py", program}}, "");
    const bool reached_end = r.out.find("\n" + token + "\n") != std::string::npos;
    s.pass = r.ok() && reached_end;
    s.partial = s.pass ? 1.0 : 0.0;
    s.detail = r.ok() && !reached_end ? "exit 0 before the tests ended" : r.describe();
    return s;
  }
  // codecontests
  if (task.io_tests.empty()) {
    s.detail = "no tests";
    return s;
  }
  const std::string code = strip_markdown_fences(completion);
  int64_t passed = 0;
  for (size_t i = 0; i < task.io_tests.size(); ++i) {
    SandboxResult r = box.run({python, "solution.py"}, {{"solution.py", code}}, task.io_tests[i].first);
    const bool ok = r.ok() && strip(r.out) == strip(task.io_tests[i].second);
    passed += ok ? 1 : 0;
    if (!ok && s.detail.empty())
      s.detail = "test " + std::to_string(i + 1) + ": " + (r.ok() ? "wrong answer" : r.describe());
  }
  s.partial = static_cast<double>(passed) / static_cast<double>(task.io_tests.size());
  s.pass = passed == static_cast<int64_t>(task.io_tests.size());
  if (s.pass) s.detail = "all tests passed";
  return s;
}

}  // namespace wmtp
