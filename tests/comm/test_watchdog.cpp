// CollectiveWatchdog: the policy driven with a test clock (finished collectives are dropped in order,
// the oldest unfinished one times out with a message naming the rank, the collective and its number,
// also while the call posting it has not returned; asynchronous errors are reported at once), the
// thread calling on_failure exactly once, and the way it ends the job: abort steps that hang are
// abandoned, and the process ends though its main thread and every abort step are stuck.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/watchdog.h"

namespace wmtp {
namespace {

CollectiveWatchdog::Options options(double* now, double timeout = 10) {
  CollectiveWatchdog::Options o;
  o.who = "rank 3 on node17";
  o.timeout_s = timeout;
  o.clock = [now] { return *now; };
  return o;
}

TEST(Watchdog, FinishedCollectivesAreDroppedAndNothingFires) {
  double now = 0;
  CollectiveWatchdog w(options(&now));
  int released = 0;
  for (int i = 0; i < 3; ++i)
    w.track(
        "all_gather", [] { return true; }, [&] { ++released; });
  now = 1000;
  EXPECT_FALSE(w.check(now).has_value());
  EXPECT_EQ(w.outstanding(), 0u);
  EXPECT_EQ(released, 3);
}

TEST(Watchdog, TheOldestUnfinishedCollectiveTimesOut) {
  double now = 100;
  CollectiveWatchdog w(options(&now, 10));
  auto done1 = std::make_shared<bool>(false);
  w.track("all_gather", [done1] { return *done1; });  // #1
  now = 105;
  w.track("reduce_scatter", [] { return false; });  // #2, never finishes
  now = 109;
  EXPECT_FALSE(w.check(now).has_value());  // #1 is 9 s old
  *done1 = true;
  now = 114;
  EXPECT_FALSE(w.check(now).has_value());  // #1 done; #2 is 9 s old
  EXPECT_EQ(w.outstanding(), 1u);
  now = 115.5;
  auto msg = w.check(now);
  ASSERT_TRUE(msg.has_value());
  EXPECT_NE(msg->find("reduce_scatter (collective #2 of rank 3 on node17)"), std::string::npos) << *msg;
  EXPECT_NE(msg->find("10.5 s"), std::string::npos) << *msg;
  EXPECT_NE(msg->find("collective_timeout_s"), std::string::npos) << *msg;
}

// NCCL connects to peers inside the first collective, and a kernel's first launch may wait for the
// device: the call posting a collective can block for good, and must count against the timeout.
TEST(Watchdog, ACollectiveWhoseCallHasNotReturnedTimesOut) {
  double now = 0;
  CollectiveWatchdog w(options(&now, 10));
  const int64_t seq = w.begin("all_reduce");
  now = 9;
  EXPECT_FALSE(w.check(now).has_value());
  EXPECT_EQ(w.outstanding(), 1u) << "a collective still being posted is not done";
  now = 12;
  auto msg = w.check(now);
  ASSERT_TRUE(msg.has_value());
  EXPECT_NE(msg->find("all_reduce (collective #1 of rank 3 on node17) has not completed 12.0 s after it was started"),
            std::string::npos)
      << *msg;
  EXPECT_NE(msg->find("the call posting it has not returned"), std::string::npos) << *msg;
  // Once posted and complete, it is dropped like any other.
  w.posted(seq, [] { return true; });
  EXPECT_FALSE(w.check(now).has_value());
  EXPECT_EQ(w.outstanding(), 0u);
}

// A checkpoint write is one entry with a longer deadline of its own; the collectives inside it keep
// the watchdog's timeout, so a late one is reported though the (older) section is not late yet.
TEST(Watchdog, ASectionIsHeldToItsOwnDeadlineAndItsCollectivesToTheirs) {
  double now = 0;
  CollectiveWatchdog w(options(&now, 10));
  const int64_t section = w.begin("checkpoint write a.h5.tmp", {30, "[runtime] checkpoint_write_timeout_s"});
  w.track("all_reduce", [] { return true; });  // #2, done
  now = 15;
  EXPECT_FALSE(w.check(now).has_value()) << "the section is 15 s old, its deadline 30 s";
  const int64_t inner = w.begin("bcast");  // #3, hangs
  now = 26;
  auto late_inner = w.check(now);
  ASSERT_TRUE(late_inner.has_value());
  EXPECT_NE(late_inner->find("bcast (collective #3"), std::string::npos) << *late_inner;
  EXPECT_NE(late_inner->find("collective_timeout_s"), std::string::npos) << *late_inner;
  w.posted(inner, [] { return true; });
  EXPECT_FALSE(w.check(now).has_value());
  now = 31;  // inside HDF5's MPI-IO, out of the helpers' reach: only the section's deadline
  auto late = w.check(now);
  ASSERT_TRUE(late.has_value());
  EXPECT_NE(late->find("checkpoint write a.h5.tmp (collective #1 of rank 3 on node17) has not completed 31.0 s"),
            std::string::npos)
      << *late;
  EXPECT_NE(late->find("timeout 30.0 s, [runtime] checkpoint_write_timeout_s"), std::string::npos) << *late;
  w.posted(section, [] { return true; });
  EXPECT_FALSE(w.check(now).has_value());
  EXPECT_EQ(w.outstanding(), 0u);
}

TEST(Watchdog, ZeroTimeoutNeverTimesOut) {
  double now = 0;
  CollectiveWatchdog w(options(&now, 0));
  w.track("all_reduce", [] { return false; });
  now = 1e9;
  EXPECT_FALSE(w.check(now).has_value());
}

TEST(Watchdog, AnAsynchronousErrorIsReportedAtOnce) {
  double now = 0;
  auto o = options(&now, 600);
  std::string err;
  o.async_error = [&err] { return err; };
  CollectiveWatchdog w(std::move(o));
  w.track("all_gather", [] { return false; });
  EXPECT_FALSE(w.check(now).has_value());
  err = "remote process exited or there was a network error";
  auto msg = w.check(now);
  ASSERT_TRUE(msg.has_value());
  EXPECT_NE(msg->find("rank 3 on node17"), std::string::npos) << *msg;
  EXPECT_NE(msg->find("network error"), std::string::npos) << *msg;
  EXPECT_NE(msg->find("all_gather #1"), std::string::npos) << *msg;
}

TEST(Watchdog, TheThreadCallsOnFailureOnce) {
  CollectiveWatchdog::Options o;
  o.who = "rank 0";
  o.timeout_s = 0.05;
  o.poll_s = 0.01;
  std::atomic<int> calls{0};
  o.on_failure = [&calls](const std::string&) { ++calls; };
  CollectiveWatchdog w(std::move(o));
  w.track("broadcast", [] { return false; });
  w.start();
  // Bounded wait for the event, not a timing assertion: the thread fires once, then stops polling.
  for (int i = 0; i < 1000 && calls.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  w.stop();
  EXPECT_EQ(calls.load(), 1);
}

// ncclCommAbort frees device memory and so never returns while a stream is held: a stuck step must
// not keep the next one (MPI_Abort) from running.
TEST(AbortSteps, AStuckStepIsAbandonedAndTheNextOneRuns) {
  auto release = std::make_shared<std::atomic<bool>>(false);
  std::mutex mu;
  std::vector<std::string> ran;
  auto log = [&](const std::string& s) {
    std::lock_guard<std::mutex> lock(mu);
    ran.push_back(s);
  };
  std::vector<AbortStep> steps = {
      {"first", [&] { log("first"); }},
      {"stuck",
       [release, &log] {
         log("stuck");
         while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
       }},
      {"last", [&] { log("last"); }},
  };
  std::vector<std::string> noted;
  const auto abandoned = run_abort_steps(steps, 2.0, [&](const std::string& s) { noted.push_back(s); });
  EXPECT_EQ(abandoned, std::vector<std::string>{"stuck"});
  EXPECT_EQ(noted, std::vector<std::string>{"stuck"});
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(ran, (std::vector<std::string>{"first", "stuck", "last"}));
  }
  // The abandoned thread touches only what it owns once released (it polls every 5 ms).
  release->store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// The whole failure path, run in a child process: the main thread is blocked for good (as in a
// device synchronization behind a dead peer), the first abort step never returns (ncclCommAbort
// behind a held stream); the message naming the rank and the collective is printed, the second step
// runs, and the process ends with exit 1 (terminate). A watchdog that waited for the stuck step
// would leave the child to that step's own exit 7 after 30 s.
[[noreturn]] void stuck_process() {
  CollectiveWatchdog::Options o;
  o.who = "rank 3 on node17";
  o.timeout_s = 0.05;
  o.poll_s = 0.01;
  o.on_failure = [](const std::string& m) {
    fprintf(stderr, "wmtp: error: %s\n", m.c_str());
    fflush(stderr);
  };
  o.abort = {{"stuck abort",
              [] {
                std::this_thread::sleep_for(std::chrono::seconds(30));
                std::_Exit(7);
              }},
             {"second abort", [] {
                fprintf(stderr, "second abort step ran\n");
                fflush(stderr);
              }}};
  o.abort_grace_s = 2;  // ample for a step that returns, even on a loaded machine
  o.terminate = [] { std::_Exit(1); };
  CollectiveWatchdog w(std::move(o));
  w.begin("all_reduce");  // the call posting it never returns
  w.start();
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

TEST(WatchdogDeathTest, TheProcessEndsThoughItsMainThreadAndAnAbortStepAreStuck) {
  // "fast" style: the child is a fork that only runs stuck_process() (the "threadsafe" style would
  // re-run the test binary, whose main initializes MPI again inside a singleton MPI job).
  GTEST_FLAG_SET(death_test_style, "fast");
  EXPECT_EXIT(stuck_process(), ::testing::ExitedWithCode(1),
              "all_reduce \\(collective #1 of rank 3 on node17\\) has not completed.*stuck abort did not return.*"
              "second abort step ran");
}

}  // namespace
}  // namespace wmtp
