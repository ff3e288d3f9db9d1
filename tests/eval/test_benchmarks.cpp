// Benchmark rules: the task subset is CPython's random.Random(42).sample (values printed by CPython
// 3.11), HumanEval completion cleaning, the GSM8K extraction chain, and scoring in the sandbox
// (a right and a wrong program per code benchmark).
#include <gtest/gtest.h>

#include <vector>

#include "eval/benchmarks.h"
#include "eval/sandbox.h"

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
  EXPECT_TRUE(score_completion("codecontests", cc, "a, b = map(int, input().split())\nprint(a + b)\n", box, "python3").pass);
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
