// PhaseTimer on the CPU (wall clock): intervals of a phase add up, phases nest, counts are kept,
// take() starts afresh, paused intervals are not counted, the phases come in kStepPhases' order with
// one head_<k> per head, and a head the model does not have is refused.
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
  PhaseTimer timer(/*heads=*/1, c10::Device(c10::kCPU));
  {
    PhaseScope outer(&timer, Phase::Step);
    for (int i = 0; i < 2; ++i) {
      PhaseScope inner(&timer, Phase::AllgatherWait);
      sleep_ms(15);
    }
    sleep_ms(10);
  }
  std::vector<PhaseTotal> t = timer.take();
  int64_t n_inner = 0, n_outer = 0, n_idle = 0;
  const double inner = seconds_of(t, "allgather_wait", &n_inner), outer = seconds_of(t, "step", &n_outer);
  EXPECT_EQ(n_inner, 2);
  EXPECT_EQ(n_outer, 1);
  EXPECT_GE(inner, 0.030);  // slept 2 x 15 ms inside (a lower bound: sleeping never takes less)
  EXPECT_GE(outer, inner + 0.010) << "the outer interval contains the inner ones and its own 10 ms";
  EXPECT_EQ(seconds_of(t, "clip", &n_idle), 0.0);
  EXPECT_EQ(n_idle, 0);

  std::vector<PhaseTotal> again = timer.take();
  EXPECT_EQ(seconds_of(again, "step"), 0.0) << "take() starts afresh";
}

TEST(PhaseTimer, ReportsTheStepPhasesInOrderWithOneRowPerHead) {
  PhaseTimer timer(/*heads=*/3, c10::Device(c10::kCPU));
  { PhaseScope h(&timer, Phase::Head, 2); }
  std::string names, top;
  int64_t head2 = 0;
  for (const PhaseTotal& p : timer.take()) {
    names += p.name + " ";
    if (p.top_level) top += p.name + " ";
    if (p.name == "head_2") head2 = p.count;
  }
  EXPECT_EQ(names,
            "data prepare trunk_forward trunk_backward clip optimizer head_0 head_1 head_2 allgather_wait "
            "reduce_scatter_wait host_sync step ");
  EXPECT_EQ(top, "data prepare trunk_forward trunk_backward clip optimizer head_0 head_1 head_2 ")
      << "the top-level phases partition the step; the waits nest inside them";
  EXPECT_EQ(head2, 1) << "Phase::Head with head 2 is head_2's interval";
}

TEST(PhaseTimer, PausedIntervalsAndNullTimersCountNothing) {
  PhaseTimer timer(/*heads=*/1, c10::Device(c10::kCPU));
  timer.set_paused(true);
  {
    PhaseScope s(&timer, Phase::Optimizer);
    sleep_ms(5);
  }
  timer.set_paused(false);
  int64_t n = -1;
  EXPECT_EQ(seconds_of(timer.take(), "optimizer", &n), 0.0);
  EXPECT_EQ(n, 0);
  PhaseScope none(nullptr, Phase::Head, 7);  // no timer: nothing to do, nothing checked
}

TEST(PhaseTimer, HostClockIsTheWallClockToo) {
  PhaseTimer timer(/*heads=*/1, c10::Device(c10::kCPU));
  {
    PhaseScope s(&timer, Phase::HostSync, PhaseClock::Host);
    sleep_ms(5);
  }
  EXPECT_GE(seconds_of(timer.take(), "host_sync"), 0.005);
}

TEST(PhaseTimer, AHeadTheModelDoesNotHaveIsRefused) {
  PhaseTimer timer(/*heads=*/2, c10::Device(c10::kCPU));
  EXPECT_THROW(timer.begin(Phase::Head, 2), Error);
  EXPECT_THROW(timer.begin(Phase::Head, -1), Error);
}

}  // namespace
}  // namespace wmtp
