// StepProfiler on the CPU: a trace of exactly the configured steps after warm-up is written as
// Chrome-trace JSON that parses, holds the operators that ran (aten::mm) and the trainer's phases
// as named ranges, and nothing before the warm-up ends or after the last profiled step. A trace that
// cannot be written is reported, not thrown, and leaves no file; a window past the run's end or cut
// by it is announced; an earlier trace is kept.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "core/phase_timer.h"
#include "test_util.h"
#include "train/step_profiler.h"

namespace wmtp {
namespace {

int count_named(const json::Value& trace, const std::string& name) {
  int n = 0;
  for (const json::Value& e : trace.at("traceEvents").as_array())
    if (const json::Value* v = e.find("name"); v && v->is_string() && v->as_string() == name) ++n;
  return n;
}

TEST(StepProfiler, TracesTheStepsAfterWarmupWithThePhases) {
  const std::string dir = test::scratch_dir("step_profiler");
  PhaseTimer phases(/*heads=*/1, c10::Device(c10::kCPU));
  StepProfiler profiler(/*steps=*/2, /*warmup=*/1, dir, /*writer=*/true, c10::Device(c10::kCPU));
  at::Tensor a = at::randn({32, 32});
  std::vector<std::string> written;
  for (int64_t done = 0; done < 4; ++done) {  // step 1 warms up, steps 2-3 are traced, step 4 is not
    profiler.before_step(done);
    {
      PhaseScope phase(&phases, Phase::Optimizer);
      // one distinct op per step, so the trace shows which steps it holds
      if (done == 0) at::cumsum(a, 0);
      at::mm(a, a);
      if (done == 3) at::cumprod(a, 0);
    }
    if (auto w = profiler.after_step(done + 1)) {
      EXPECT_EQ(w->failure, "");
      EXPECT_EQ(w->first, 2);
      EXPECT_EQ(w->last, 3);
      written.push_back(w->path);
    }
  }
  ASSERT_EQ(written.size(), 1u) << "one trace, written when its last step ends";
  EXPECT_EQ(written[0], dir + "/trace_rank0.json");
  const json::Value trace = json::parse(test::read_file(written[0]));
  EXPECT_EQ(count_named(trace, "aten::mm"), 2) << "one matmul per traced step";
  EXPECT_EQ(count_named(trace, "optimizer"), 2) << "the phase as a named range per step";
  EXPECT_EQ(count_named(trace, "aten::cumsum"), 0) << "the warm-up step is not traced";
  EXPECT_EQ(count_named(trace, "aten::cumprod"), 0) << "steps after the traced ones are not";
}

TEST(StepProfiler, OffWritesNothingAndOnlyTheWriterRecords) {
  const std::string dir = test::scratch_dir("step_profiler_off");
  for (auto [steps, writer] : {std::pair<int64_t, bool>{0, true}, {2, false}}) {
    StepProfiler profiler(steps, 0, dir, writer, c10::Device(c10::kCPU));
    for (int64_t done = 0; done < 3; ++done) {
      profiler.before_step(done);
      at::mm(at::ones({4, 4}), at::ones({4, 4}));
      EXPECT_FALSE(profiler.after_step(done + 1).has_value());
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/trace_rank0.json"));
}

// Runs `n` steps of one matmul through the profiler; returns what after_step and finish_early gave.
std::vector<TraceWrite> run_steps(StepProfiler& profiler, int64_t n) {
  std::vector<TraceWrite> out;
  at::Tensor a = at::randn({8, 8});
  for (int64_t done = 0; done < n; ++done) {
    profiler.before_step(done);
    at::mm(a, a);
    if (auto w = profiler.after_step(done + 1)) out.push_back(*w);
  }
  if (auto w = profiler.finish_early(n)) out.push_back(*w);
  return out;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(StepProfiler, AnUnwritableTraceIsReportedNotThrownAndLeavesNoFile) {
  const std::string dir = test::scratch_dir("step_profiler_unwritable");
  std::filesystem::create_directories(dir + "/trace_rank0.json");  // the trace's path is a directory
  StepProfiler profiler(2, 0, dir, true, c10::Device(c10::kCPU));
  EXPECT_EQ(profiler.plan(0, 5).find("earlier trace"), std::string::npos) << "a directory is no earlier trace";
  std::vector<TraceWrite> w;
  EXPECT_NO_THROW(w = run_steps(profiler, 4));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].failure, "") << "the failure is reported";
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"trace_rank0.json"}) << "no temporary or partial file left";
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/trace_rank0.json"));
}

TEST(StepProfiler, PlanAnnouncesWindowsPastOrCutByTheEnd) {
  const std::string dir = test::scratch_dir("step_profiler_plan");
  {
    StepProfiler after(2, 3, dir, true, c10::Device(c10::kCPU));  // steps 14-15 of a run ending at 12
    const std::string note = after.plan(10, 12);
    EXPECT_NE(note.find("steps 14-15) starts after this run's last step 12: no trace will be written"),
              std::string::npos)
        << note;
    EXPECT_TRUE(run_steps(after, 2).empty());
  }
  StepProfiler cut(3, 1, dir, true, c10::Device(c10::kCPU));  // steps 12-14 of a run ending at 13
  const std::string note = cut.plan(10, 13);
  EXPECT_NE(note.find("steps 12-14) is cut by this run's last step 13: the trace will hold steps 12-13"),
            std::string::npos)
      << note;
  const std::vector<TraceWrite> w = run_steps(cut, 3);
  ASSERT_EQ(w.size(), 1u) << "finish_early writes the cut window";
  EXPECT_EQ(w[0].failure, "");
  EXPECT_EQ(w[0].first, 12);
  EXPECT_EQ(w[0].last, 13);
  EXPECT_EQ(count_named(json::parse(test::read_file(w[0].path)), "aten::mm"), 2) << "the two steps it had";
}

TEST(StepProfiler, AResumedRunKeepsTheEarlierTrace) {
  const std::string dir = test::scratch_dir("step_profiler_resume");
  std::ofstream(dir + "/trace_rank0.json") << "{\"earlier\": 1}\n";
  StepProfiler profiler(1, 0, dir, true, c10::Device(c10::kCPU));
  const std::string note = profiler.plan(20, 30);
  EXPECT_NE(note.find("an earlier trace is kept (" + dir + "/trace_rank0.json): this run's goes to " + dir +
                      "/trace_rank0_step21.json"),
            std::string::npos)
      << note;
  const std::vector<TraceWrite> w = run_steps(profiler, 1);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].path, dir + "/trace_rank0_step21.json");
  EXPECT_EQ(test::read_file(dir + "/trace_rank0.json"), "{\"earlier\": 1}\n");
}

}  // namespace
}  // namespace wmtp
