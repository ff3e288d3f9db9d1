// Nothing outlives the evaluator: an evaluator killed (SIGKILL, SIGTERM: a scheduler's time limit,
// scancel, an MPI abort) while its program runs leaves no process of the run (the program, a child it
// double-forked into a session of its own) and no scratch directory; with namespaces and without
// (there the program's group and scratch). With namespaces, neither does a supervisor killed alone.
// bin/evaluate itself at 1 and 2 ranks: test_evaluate_sandbox. And a program has no controlling
// terminal to write to or push input into.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "eval/sandbox.h"
#include "sandbox_test_util.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace wmtp {
namespace {

bool wait_until(const std::function<bool()>& done, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// The one child of `parent` (the evaluator's supervisor), or -1.
pid_t child_of(pid_t parent) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream f(e.path() / "stat");
    std::string line;
    if (!std::getline(f, line) || line.rfind(')') == std::string::npos) continue;
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) return static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
  }
  return -1;
}

struct Kill {
  bool isolated;
  bool supervisor;  // the supervisor killed (scancel's SIGKILL to every process, the OOM killer), not the evaluator
  int sig;
};

TEST(SandboxLifetime, NothingOutlivesTheEvaluator) {
  const Kill kills[] = {{true, false, SIGKILL},
                        {true, false, SIGTERM},
                        {true, true, SIGKILL},
                        {false, false, SIGKILL},
                        {false, false, SIGTERM}};
  for (const Kill& k : kills) {
    const std::string what = std::string(k.isolated ? "namespaces" : "no isolation") + ", " +
                             (k.supervisor ? "supervisor" : "evaluator") + " killed by " +
                             (k.sig == SIGKILL ? "SIGKILL" : "SIGTERM");
    const std::string marker = "outlive_" + std::to_string(getpid()) + "_" + std::to_string(k.isolated) +
                               std::to_string(k.supervisor) + "_" + std::to_string(k.sig) + ".py";
    const std::string scratch = test::tmp_path("sandbox-outlive");
    test::remove_tree(scratch);
    fs::create_directories(scratch);
    // Namespaces: a grandchild in a session of its own (the kernel ends it with the PID namespace).
    // Without, setsid() escapes any process group, so the child stays in the program's.
    const std::string code = k.isolated
                                 ? "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                                   "        time.sleep(120)\n    os._exit(0)\ntime.sleep(120)\n"
                                 : "import os, time\nos.fork()\ntime.sleep(120)\n";
    std::fflush(stdout);
    const pid_t evaluator = fork();
    ASSERT_GE(evaluator, 0);
    if (evaluator == 0) {
      if (!k.isolated && !test::forbid_namespaces()) _exit(3);
      setenv("TMPDIR", scratch.c_str(), 1);
      SandboxLimits lim;
      lim.timeout_s = 120;
      Sandbox box(lim, k.isolated);
      box.run({"python3", marker}, {{marker, code}}, "");
      _exit(0);
    }
    const bool running = wait_until([&] { return test::processes_with(marker).size() >= 2; }, 60.0);
    const size_t before = test::processes_with(marker).size();
    const pid_t victim = k.supervisor ? child_of(evaluator) : evaluator;
    if (victim > 0) kill(victim, k.sig);
    int st = 0;
    const bool evaluator_ended = wait_until([&] { return waitpid(evaluator, &st, WNOHANG) == evaluator; }, 30.0);
    if (!evaluator_ended) {
      kill(evaluator, SIGKILL);
      waitpid(evaluator, &st, 0);
    }
    const int left = test::reap_marker(marker, 10.0);
    const bool clean = wait_until([&] { return fs::is_empty(scratch); }, 10.0);
    std::printf("%-50s processes of the run %zu before, %d left after 10 s; scratch %s\n", what.c_str(), before, left,
                clean ? "removed" : "left behind");
    EXPECT_TRUE(running && victim > 0) << what << ": the program never started";
    if (k.supervisor) EXPECT_TRUE(evaluator_ended && WIFEXITED(st)) << what << ": the evaluator did not go on";
    else
      EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == k.sig) << what << ": the evaluator was not killed by the signal";
    EXPECT_EQ(left, 0) << what << ": processes outlived the evaluator";
    EXPECT_TRUE(clean) << what << ": the scratch directory outlived the evaluator";
    test::remove_tree(scratch);
  }
}

// An evaluator started from a terminal: the program must not get it (TIOCSTI would push keystrokes into
// the user's shell). The test's child takes a pseudo-terminal as its controlling terminal first.
TEST(SandboxLifetime, NoControllingTerminal) {
  const std::string verdict = test::in_child([]() -> std::string {
    setsid();
    const int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) return "no pseudo-terminal";
    const int slave = open(ptsname(master), O_RDWR);
    if (slave < 0 || ioctl(slave, TIOCSCTTY, 0) != 0) return "cannot make the pseudo-terminal controlling";
    if (open("/dev/tty", O_RDWR) < 0) return "the test's child has no controlling terminal";
    SandboxLimits lim;
    lim.timeout_s = 10;
    Sandbox box(lim, /*require_isolation=*/true);
    const SandboxResult r =
        box.run({"python3", "tty.py"},
                {{"tty.py",
                  "import sys\ntty = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[4])\n"
                  "print('controlling terminal', tty, end='; ')\ntry:\n    open('/dev/tty', 'w').write('owned\\n')\n"
                  "    sys.exit(3)\nexcept OSError as e:\n    print(e)\nsys.exit(3 if tty else 1)\n"}},
                "");
    std::printf("open /dev/tty -> %s: %s", r.describe().c_str(), r.out.c_str());
    return r.describe() == "exit 1" ? "" : "the program had a controlling terminal: " + r.describe() + " " + r.out;
  });
  EXPECT_EQ(verdict, "");
}

}  // namespace
}  // namespace wmtp
