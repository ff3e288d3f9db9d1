// A pass is the tests passing, not an exit status: HumanEval and MBPP programs that exit with 0 before
// their tests ran (sys.exit, os._exit, exit(), raise SystemExit; in the function check() calls or at
// module level) fail, correct programs pass whatever they print or do to sys.stdout, and CodeContests
// (judged by its output) still accepts a solution that exits with 0 after printing its answer.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "eval/benchmarks.h"
#include "eval/sandbox.h"

namespace wmtp {
namespace {

struct Case {
  const char* what;
  std::string completion;
  bool pass;
};

void expect_scores(const std::string& bench, const BenchTask& task, const std::vector<Case>& cases) {
  SandboxLimits lim;
  lim.timeout_s = 10.0;
  Sandbox box(lim, /*require_isolation=*/true);
  for (const Case& c : cases) {
    const Score s = score_completion(bench, task, c.completion, box, "python3");
    std::printf("%-12s %-46s -> %s (%s)\n", bench.c_str(), c.what, s.pass ? "pass" : "fail", s.detail.c_str());
    EXPECT_EQ(s.pass, c.pass) << bench << ": " << c.what << " (" << s.detail << ")";
  }
}

TEST(SandboxScoring, HumanEvalPassIsTheTestsPassing) {
  BenchTask t;
  t.id = "add";
  t.code_prompt = "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n";
  t.test = "def check(f):\n    assert f(2, 3) == 5\n    assert f(-1, 1) == 0\n";
  t.entry_point = "add";
  expect_scores("humaneval", t,
                {{"correct", "    return a + b\n", true},
                 {"correct, printing", "    print('adding', a, b)\n    return a + b\n", true},
                 {"correct, sys.stdout replaced",
                  "    import io, sys\n    sys.stdout = io.StringIO()\n    return a + b\n", true},
                 {"wrong", "    return a - b\n", false},
                 {"sys.exit(0) inside the function", "    import sys\n    sys.exit(0)\n", false},
                 {"os._exit(0) inside the function", "    import os\n    os._exit(0)\n", false},
                 {"raise SystemExit inside the function", "    raise SystemExit\n", false},
                 {"exit() at module level", "    return 0\nexit()\n", false},
                 {"os._exit(0) at module level", "    return 0\nimport os\nos._exit(0)\n", false}});
}

TEST(SandboxScoring, MbppPassIsTheTestsPassing) {
  BenchTask t;
  t.id = "1";
  t.setup = "";
  t.asserts = {"assert add(2, 3) == 5", "assert add(-1, 1) == 0"};
  expect_scores("mbpp", t,
                {{"correct", "def add(a, b):\n    return a + b\n", true},
                 {"correct, in a markdown fence", "```python\ndef add(a, b):\n    return a + b\n```\n", true},
                 {"wrong", "def add(a, b):\n    return a * b\n", false},
                 {"sys.exit(0) at module level", "import sys\nsys.exit(0)\n", false},
                 {"os._exit(0) at module level", "import os\nos._exit(0)\n", false},
                 {"exit()", "exit()\n", false},
                 {"quit() after a correct function", "def add(a, b):\n    return a + b\nquit()\n", false}});
}

TEST(SandboxScoring, CodeContestsIsJudgedByItsOutput) {
  BenchTask t;
  t.id = "double";
  t.io_tests = {{"2\n", "4\n"}, {"5\n", "10\n"}};
  expect_scores("codecontests", t,
                {{"correct", "print(2 * int(input()))\n", true},
                 {"correct, then sys.exit(0)", "import sys\nprint(2 * int(input()))\nsys.exit(0)\n", true},
                 {"sys.exit(0) before printing", "import sys\nsys.exit(0)\n", false}});
}

}  // namespace
}  // namespace wmtp
