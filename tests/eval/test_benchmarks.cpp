// Benchmark rules: the task subset is CPython's random.Random(42).sample (values printed by CPython
// 3.11), HumanEval completion cleaning, the GSM8K extraction chain, and scoring in the sandbox
// (a right and a wrong program per code benchmark). Rows that cannot be scored as they should
// (no asserts, a setup of another type, tests that are not {input, output} lists, a GSM8K reference
// without a number a double holds) are refused with file:line; a completion's number of 400 digits is
// a wrong answer, not an error.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/benchmarks.h"
#include "eval/sandbox.h"
#include "test_util.h"

namespace wmtp {
namespace {

std::vector<int64_t> head(std::vector<int64_t> v, size_t n) {
  v.resize(std::min(v.size(), n));
  return v;
}

TEST(Benchmarks, SampleIsCPythons) {
  EXPECT_EQ(head(py_sample_indices(42, 164, 100), 12),
            (std::vector<int64_t>{163, 28, 6, 70, 62, 57, 35, 26, 139, 22, 151, 108}));
  EXPECT_EQ(py_sample_indices(42, 20, 10), (std::vector<int64_t>{3, 0, 8, 7, 16, 2, 11, 1, 10, 17}));
  EXPECT_EQ(head(py_sample_indices(42, 5000, 100), 12),  // CPython's set branch
            (std::vector<int64_t>{912, 204, 2253, 2006, 1828, 1143, 839, 4467, 712, 4837, 3456, 260}));
  EXPECT_EQ(py_sample_indices(42, 13, 10), (std::vector<int64_t>{10, 1, 0, 4, 3, 8, 11, 5, 12, 9}));
}

TEST(Benchmarks, HumanEvalCleaning) {
  const std::string prompt = "def add(a, b):\n    \"\"\"Sum.\"\"\"\n";
  EXPECT_EQ(clean_humaneval_completion("    return a + b\n\ndef other():\n    pass\n", prompt), "    return a + b");
  EXPECT_EQ(clean_humaneval_completion("```python\ndef add(a, b):\n    return a + b\n```\nmore", prompt),
            "\n    return a + b");
  EXPECT_EQ(clean_humaneval_completion("    return a + b\nprint(add(1, 2))\n", prompt), "    return a + b");
  EXPECT_EQ(clean_humaneval_completion("    return a + b\n# test\n", prompt), "    return a + b");
}

TEST(Benchmarks, Gsm8kExtraction) {
  double v = 0;
  ASSERT_TRUE(extract_gsm8k_number("She has 3 + 4 = 7 apples.\n#### 7", &v));
  EXPECT_EQ(v, 7);
  ASSERT_TRUE(extract_gsm8k_number("prompt 99 ### Response:\nSo the answer is 1,234.5 dollars, not 3", &v));
  EXPECT_EQ(v, 1234.5);
  ASSERT_TRUE(extract_gsm8k_number("Answer: -12", &v));
  EXPECT_EQ(v, -12);
  ASSERT_TRUE(extract_gsm8k_number("first 5 then 8 finally 13", &v));
  EXPECT_EQ(v, 13);
  EXPECT_FALSE(extract_gsm8k_number("no digits here", &v));
}

// The message load_benchmark refuses `rows` (JSONL lines) with, "" when it accepts them.
std::string refusal(const std::string& benchmark, const std::vector<std::string>& rows) {
  const std::string path = test::tmp_path("bench_rows.jsonl");
  std::ofstream(path) << [&] {
    std::string text;
    for (const auto& r : rows) text += r + "\n";
    return text;
  }();
  try {
    load_benchmark(benchmark, path, 0);
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    return e.what();
  }
}

::testing::AssertionResult refused_at(const std::string& message, const std::string& where, const std::string& what) {
  if (message.find(where) != std::string::npos && message.find(what) != std::string::npos)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "wanted " << where << " and \"" << what << "\", got \"" << message << "\"";
}

TEST(Benchmarks, RowsThatCannotBeScoredAreRefused) {
  const std::string good = R"({"task_id": 1, "text": "t", "test_list": ["assert True"], "test_setup_code": ""})";
  EXPECT_EQ(refusal("mbpp", {good, R"({"task_id": 2, "text": "t", "test_list": ["assert 1"]})"}),
            "");  // no setup: fine
  EXPECT_TRUE(
      refused_at(refusal("mbpp", {good, R"({"task_id": 2, "text": "t", "test_list": [], "test_setup_code": ""})"}),
                 "bench_rows.jsonl:2", "test_list"));
  EXPECT_TRUE(refused_at(refusal("mbpp", {R"({"task_id": 2, "text": "t", "test_list": [3], "test_setup_code": ""})"}),
                         "bench_rows.jsonl:1", "test_list"));
  EXPECT_TRUE(
      refused_at(refusal("mbpp", {R"({"task_id": 2, "text": "t", "test_list": ["assert 1"], "test_setup_code": 5})"}),
                 "bench_rows.jsonl:1", "test_setup_code"));
  EXPECT_TRUE(refused_at(refusal("mbpp", {R"({"task_id": 2, "text": 7, "test_list": ["assert 1"]})"}),
                         "bench_rows.jsonl:1", "\"text\""));
  // A bad row that --max-tasks would leave out is refused too: the file is wrong.
  EXPECT_TRUE(refused_at(refusal("mbpp", {good, good, R"({"task_id": 3, "text": "t", "test_list": []})"}),
                         "bench_rows.jsonl:3", "test_list"));
  const std::string cc = R"({"name": "a", "description": "d", "public_tests": )";
  EXPECT_EQ(refusal("codecontests", {cc + R"({"input": ["1"], "output": ["1"]}})"}), "");
  EXPECT_TRUE(refused_at(refusal("codecontests", {cc + R"({"input": ["1", "2"], "output": ["1"]}})"}),
                         "bench_rows.jsonl:1", "public_tests"));
  EXPECT_TRUE(refused_at(refusal("codecontests", {cc + R"([["1"], ["1"]]})"}), "bench_rows.jsonl:1", "public_tests"));
  EXPECT_TRUE(refused_at(refusal("gsm8k", {R"({"question": "q", "answer": "#### 4"})",
                                           R"({"question": "q", "answer": "none"})"}),
                         "bench_rows.jsonl:2", "no number"));
  const std::string huge(400, '9');
  EXPECT_TRUE(refused_at(refusal("gsm8k", {R"({"question": "q", "answer": "#### )" + huge + R"("})"}),
                         "bench_rows.jsonl:1", "outside a double's range"));
}

TEST(Benchmarks, Gsm8kNumbersADoubleCannotHold) {
  double v = -1;
  const std::string huge(400, '9');
  EXPECT_FALSE(extract_gsm8k_number("#### " + huge, &v));
  EXPECT_FALSE(extract_gsm8k_number("so " + huge + " it is", &v));
  // A tiny number underflows to about 0: within 1e-6 of what it says.
  ASSERT_TRUE(extract_gsm8k_number("#### 0." + std::string(400, '0') + "1", &v));
  EXPECT_LT(std::abs(v), 1e-300);
  BenchTask gs;
  gs.answer = "#### 4";
  Sandbox box(SandboxLimits{}, false);
  const Score s = score_completion("gsm8k", gs, "### Response:\nThe answer is " + huge, box, "python3");
  EXPECT_FALSE(s.pass);
  EXPECT_NE(s.detail.find("wrong answer"), std::string::npos) << s.detail;
}

TEST(Benchmarks, ScoringRunsProgramsInTheSandbox) {
  SandboxLimits lim;
  lim.timeout_s = 5.0;
  Sandbox box(lim, true);
  BenchTask he;
  he.code_prompt = "def add(a, b):\n";
  he.test = "def check(f):\n    assert f(2, 3) == 5\n";
  he.entry_point = "add";
  EXPECT_TRUE(score_completion("humaneval", he, "    return a + b\n", box, "python3").pass);
  EXPECT_FALSE(score_completion("humaneval", he, "    return a - b\n", box, "python3").pass);

  BenchTask mb;
  mb.setup = "import math";
  mb.asserts = {"assert sq(3) == 9", "assert sq(0) == 0"};
  EXPECT_TRUE(score_completion("mbpp", mb, "```python\ndef sq(x):\n    return x * x\n```", box, "python3").pass);
  EXPECT_FALSE(score_completion("mbpp", mb, "def sq(x):\n    return x + x\n", box, "python3").pass);

  BenchTask cc;
  cc.io_tests = {{"1 2\n", "3\n"}, {"5 5\n", "10"}};
  EXPECT_TRUE(
      score_completion("codecontests", cc, "a, b = map(int, input().split())\nprint(a + b)\n", box, "python3").pass);
  Score half = score_completion("codecontests", cc, "a, b = map(int, input().split())\nprint(a * b if a == 5 else 3)\n",
                                box, "python3");
  EXPECT_FALSE(half.pass);
  EXPECT_DOUBLE_EQ(half.partial, 0.5);
  BenchTask none;
  EXPECT_FALSE(score_completion("codecontests", none, "print(1)", box, "python3").pass);

  BenchTask gs;
  gs.answer = "2 + 2 = 4\n#### 4";
  EXPECT_TRUE(score_completion("gsm8k", gs, "### Response:\nThe answer is 4.", box, "python3").pass);
  EXPECT_FALSE(score_completion("gsm8k", gs, "The answer is 5.", box, "python3").pass);
}

}  // namespace
}  // namespace wmtp
