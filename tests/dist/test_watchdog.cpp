// CollectiveWatchdog: the policy driven with a test clock (finished collectives are dropped in order,
// the oldest unfinished one times out with a message naming the rank, the collective and its number,
// asynchronous errors are reported at once), and the thread calling on_failure exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "dist/watchdog.h"

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
  for (int i = 0; i < 3; ++i) w.track("all_gather", [] { return true; }, [&] { ++released; });
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
  w.track("reduce_scatter", [] { return false; });    // #2, never finishes
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

}  // namespace
}  // namespace wmtp
