// PhaseTimer on the CPU (wall clock): intervals of a phase add up, phases nest, counts are kept,
// take() starts afresh, paused intervals are not counted, and an undeclared phase is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "core/phase_timer.h"

namespace wmtp {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

double seconds_of(const std::vector<PhaseTotal>& totals, const std::string& name, int64_t* count = nullptr) {
  for (const PhaseTotal& t : totals)
    if (t.name == name) {
      if (count) *count = t.count;
      return t.seconds;
    }
  ADD_FAILURE() << "no phase " << name;
  return -1;
}

TEST(PhaseTimer, IntervalsAddUpNestAndResetOnTake) {
  PhaseTimer timer({"outer", "inner", "idle"}, c10::Device(c10::kCPU));
  {
    PhaseScope outer(&timer, "outer");
    for (int i = 0; i < 2; ++i) {
      PhaseScope inner(&timer, "inner");
      sleep_ms(15);
    }
    sleep_ms(10);
  }
  std::vector<PhaseTotal> t = timer.take();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "outer");  // the declared order
  int64_t n_inner = 0, n_outer = 0, n_idle = 0;
  const double inner = seconds_of(t, "inner", &n_inner), outer = seconds_of(t, "outer", &n_outer);
  EXPECT_EQ(n_inner, 2);
  EXPECT_EQ(n_outer, 1);
  EXPECT_GE(inner, 0.030);  // slept 2 x 15 ms inside (a lower bound: sleeping never takes less)
  EXPECT_GE(outer, inner + 0.010) << "the outer interval contains the inner ones and its own 10 ms";
  EXPECT_EQ(seconds_of(t, "idle", &n_idle), 0.0);
  EXPECT_EQ(n_idle, 0);

  std::vector<PhaseTotal> again = timer.take();
  EXPECT_EQ(seconds_of(again, "outer"), 0.0) << "take() starts afresh";
}

TEST(PhaseTimer, PausedIntervalsAndNullTimersCountNothing) {
  PhaseTimer timer({"work"}, c10::Device(c10::kCPU));
  timer.set_paused(true);
  {
    PhaseScope s(&timer, "work");
    sleep_ms(5);
  }
  timer.set_paused(false);
  int64_t n = -1;
  EXPECT_EQ(seconds_of(timer.take(), "work", &n), 0.0);
  EXPECT_EQ(n, 0);
  PhaseScope none(nullptr, "anything");  // no timer: nothing to do, nothing checked
}

TEST(PhaseTimer, HostClockIsTheWallClockToo) {
  PhaseTimer timer({"host_sync"}, c10::Device(c10::kCPU));
  {
    PhaseScope s(&timer, "host_sync", PhaseClock::Host);
    sleep_ms(5);
  }
  EXPECT_GE(seconds_of(timer.take(), "host_sync"), 0.005);
}

TEST(PhaseTimer, UndeclaredPhaseIsRefused) {
  PhaseTimer timer({"a"}, c10::Device(c10::kCPU));
  EXPECT_THROW(timer.begin("b"), Error);
}

}  // namespace
}  // namespace wmtp
