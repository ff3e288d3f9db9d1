// What the MPI watchdog says about its peers after a timeout: CollectiveWatchdog::progress (how far
// this rank got: its last collective and its oldest unfinished one), PeerProgress::describe (which
// rank did not answer, never arrived, is stuck earlier, or is in the late collective too), and the
// thread appending the peers' answer for the late collective to the one failure message.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "comm/peer_progress.h"
#include "comm/watchdog.h"

namespace wmtp {
namespace {

TEST(WatchdogProgress, LastBegunAndOldestUnfinished) {
  double now = 0;
  CollectiveWatchdog::Options o;
  o.who = "rank 0 on host1";
  o.clock = [&now] { return now; };
  CollectiveWatchdog w(o);
  EXPECT_EQ(w.progress().last, 0);
  EXPECT_EQ(w.progress().open, 0);
  w.track("all_gather", [] { return true; });
  const int64_t s2 = w.begin("all_reduce");
  CollectiveWatchdog::Progress p = w.progress();
  EXPECT_EQ(p.last, 2);
  EXPECT_EQ(p.last_op, "all_reduce");
  EXPECT_EQ(p.open, 2) << "#1 is done: #2, still being posted, is the open one";
  EXPECT_EQ(p.open_op, "all_reduce");
  w.posted(s2, [] { return true; });
  p = w.progress();
  EXPECT_EQ(p.open, 0);
  EXPECT_EQ(p.last, 2);
}

PeerProgress::Answer answer(int64_t last, int64_t open, const char* who) {
  PeerProgress::Answer a;
  a.last = last;
  a.open = open;
  snprintf(a.last_op, sizeof(a.last_op), "op%lld", static_cast<long long>(last));
  snprintf(a.open_op, sizeof(a.open_op), "op%lld", static_cast<long long>(open));
  snprintf(a.who, sizeof(a.who), "%s", who);
  return a;
}

TEST(PeerProgress, NamesWhoDidNotArrive) {
  const std::vector<std::string> names = {"rank 0 on h1", "rank 1 on h2", "rank 2 on h3", "rank 3 on h4",
                                          "rank 4 on h5"};
  PeerProgress::Answer there = answer(7, 7, "rank 1 on h2"), behind = answer(6, 0, "rank 2 on h3"),
                       stuck = answer(5, 5, "rank 4 on h5");
  // Rank 0 asks about #7; rank 3 does not answer.
  const std::string s = PeerProgress::describe(7, {nullptr, &there, &behind, nullptr, &stuck}, 0, 2, names);
  EXPECT_NE(s.find("rank 3 on h4 did not answer within 2 s"), std::string::npos) << s;
  EXPECT_NE(s.find("rank 2 on h3 has not arrived (its last collective, #6 op6, finished)"), std::string::npos) << s;
  EXPECT_NE(s.find("rank 4 on h5 is still in collective #5 (op5)"), std::string::npos) << s;
  EXPECT_NE(s.find("Waiting in it too: rank 1 on h2."), std::string::npos) << s;
  EXPECT_EQ(s.find("rank 0 on h1"), std::string::npos) << "the asker is not its own peer: " << s;
}

TEST(PeerProgress, EveryoneThereMeansTheNetwork) {
  PeerProgress::Answer a = answer(3, 3, "rank 1 on h2");
  const std::string s = PeerProgress::describe(3, {nullptr, &a}, 0, 1, {"rank 0 on h1", "rank 1 on h2"});
  EXPECT_EQ(s.find("did not arrive"), std::string::npos) << s;
  EXPECT_NE(s.find("the network?"), std::string::npos) << s;
}

// The thread asks `peers` about the collective that timed out and reports one message with it.
TEST(WatchdogPeers, TheLateCollectiveIsAskedAboutAndNamed) {
  std::mutex mu;
  std::condition_variable cv;
  std::string reported;
  int64_t asked_seq = 0;
  int served = 0;
  CollectiveWatchdog::Options o;
  o.who = "rank 0 on h1";
  o.backend = "MPI";
  o.timeout_s = 0.2;
  o.poll_s = 0.02;
  o.serve = [&] {
    std::lock_guard<std::mutex> l(mu);
    ++served;
  };
  o.peers = [&](int64_t seq, const std::string&) {
    asked_seq = seq;
    return std::string("Peers: did not arrive: rank 1 on h2.");
  };
  o.on_failure = [&](const std::string& msg) {
    std::lock_guard<std::mutex> l(mu);
    reported = msg;
    cv.notify_all();
  };
  CollectiveWatchdog w(o);
  w.track("barrier", [] { return true; });
  w.begin("all_reduce");  // #2 never returns
  w.start();
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(20), [&] { return !reported.empty(); }));
  EXPECT_EQ(asked_seq, 2);
  EXPECT_GT(served, 0);
  EXPECT_NE(reported.find("MPI all_reduce (collective #2 of rank 0 on h1)"), std::string::npos) << reported;
  EXPECT_NE(reported.find("Peers: did not arrive: rank 1 on h2."), std::string::npos) << reported;
  l.unlock();
  w.stop();
}

}  // namespace
}  // namespace wmtp
