// The four benchmark formats of weighted_mtp's evaluation (docs/evaluate.md, docs/parity.md): reading the user's
// JSONL files, the task subset, the prompt each task gives the model, and how a completion is scored.
//   humaneval     {task_id, prompt, test, entry_point}: the raw prompt; program = prompt + cleaned
//                 completion + test + check(entry_point), pass = the program ran to its end (a last
//                 line it prints after the tests) and exited with 0.
//   mbpp          {task_id, text, test_list, test_setup_code}: Alpaca prompt; program = setup + code
//                 + asserts, pass as for humaneval. test_list must hold at least one assert;
//                 test_setup_code may be absent (no setup) but is a string when present.
//   codecontests  {name, description, public_tests, private_tests, generated_tests ({input, output})}:
//                 Alpaca prompt after "Write a Python solution that reads from stdin and prints to
//                 stdout.\n\n"; at most 10 of the merged tests (random.Random(42).sample); pass = every
//                 sampled test's stripped stdout equals its stripped expected output; no tests: fail.
//   gsm8k         {question, answer}: Alpaca prompt; the extracted number equals the answer's (1e-6).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wmtp {

class Sandbox;

struct BenchTask {
  std::string id;
  std::string prompt;                                         // what the model is given
  std::string code_prompt;                                    // humaneval: the prompt the program starts with
  std::string test, entry_point, setup;                       // humaneval / mbpp
  std::vector<std::string> asserts;                           // mbpp
  std::vector<std::pair<std::string, std::string>> io_tests;  // codecontests (input, expected), sampled
  std::string answer;                                         // gsm8k: the reference text
};

// The benchmark's tasks: every line of `path`; when more than 100, random.Random(42).sample(tasks,
// 100) (weighted_mtp's cap); then the first `max_tasks` (0: all). Every line is checked first, those
// the subset leaves out too: a missing field or one of the wrong type, an MBPP task with no asserts,
// CodeContests tests that are not {input, output} lists of one length, a GSM8K answer without a
// number a double holds. Error(Input) naming file:line.
std::vector<BenchTask> load_benchmark(const std::string& benchmark, const std::string& path, int64_t max_tasks);

// CPython's random.Random(seed).sample(range(n), k) as indices.
std::vector<int64_t> py_sample_indices(uint64_t seed, int64_t n, int64_t k);

// Default samples per task: 10 for codecontests, 100 otherwise.
int64_t default_num_samples(const std::string& benchmark);

// HumanEval completion cleaning: markdown fences stripped, cut at the first stop sequence, a
// re-generated `def <entry>(...):` line removed, trailing blank lines stripped.
std::string clean_humaneval_completion(const std::string& completion, const std::string& prompt);
// The code inside the first markdown fence, or the text itself when there is none.
std::string strip_markdown_fences(const std::string& text);
// GSM8K: the extraction chain (docs/evaluate.md); false when no number is found or the one the chain
// picks lies outside a double's range (then `why`, when given, says which). A completion read so is
// a wrong answer; a reference is refused when its task is loaded.
bool extract_gsm8k_number(const std::string& text, double* out, std::string* why = nullptr);

struct Score {
  bool pass = false;
  double partial = 0.0;  // codecontests: fraction of sampled tests passed
  std::string detail;    // what decided it ("exit 1", "timeout", "wrong answer on test 3", ...)
};
// Scores one completion; code runs in `box` under `python`.
Score score_completion(const std::string& benchmark, const BenchTask& task, const std::string& completion,
                       const Sandbox& box, const std::string& python);

}  // namespace wmtp
