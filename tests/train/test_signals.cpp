// StopSignals in a forked child (a signal that aborts must not take the test runner with it): the
// first signal is a stop request, repeats within the window are the same request delivered twice
// (ignored), a signal after the window terminates the process at once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "train/signals.h"

namespace wmtp {
namespace {

// Runs `body` in a child; returns the wait status.
template <class F>
int in_child(F body) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(StopSignals, FirstRequestsARepeatInTheWindowIsIgnoredALaterOneKills) {
  // exit codes from the child: 3 = no request seen, 4 = survived the later signal
  int st = in_child([] {
    StopSignals s(0.5);
    raise(SIGUSR1);
    if (!s.requested() || s.signal_number() != SIGUSR1) _exit(3);
    raise(SIGTERM);  // within 0.5 s: a duplicate, ignored
    raise(SIGUSR1);
    usleep(700 * 1000);
    raise(SIGUSR1);  // after the window: the default action, at once
    _exit(4);
  });
  ASSERT_TRUE(WIFSIGNALED(st)) << "exit status " << (WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  EXPECT_EQ(WTERMSIG(st), SIGUSR1);

  st = in_child([] {  // duplicates alone never kill
    StopSignals s(0.5);
    for (int i = 0; i < 3; ++i) raise(i % 2 ? SIGTERM : SIGUSR1);
    _exit(s.requested() ? 0 : 3);
  });
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

}  // namespace
}  // namespace wmtp
