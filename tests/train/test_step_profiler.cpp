// StepProfiler on the CPU: a trace of exactly the configured steps after warm-up is written as
// Chrome-trace JSON that parses, holds the operators that ran (aten::mm) and the trainer's phases
// as named ranges, and nothing before the warm-up ends or after the last profiled step.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "core/phase_timer.h"
#include "test_util.h"
#include "train/step_profiler.h"

namespace wmtp {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int count_named(const json::Value& trace, const std::string& name) {
  int n = 0;
  for (const json::Value& e : trace.at("traceEvents").as_array())
    if (const json::Value* v = e.find("name"); v && v->is_string() && v->as_string() == name) ++n;
  return n;
}

TEST(StepProfiler, TracesTheStepsAfterWarmupWithThePhases) {
  const std::string dir = test::scratch_dir("step_profiler");
  PhaseTimer phases({"optimizer"}, c10::Device(c10::kCPU));
  StepProfiler profiler(/*steps=*/2, /*warmup=*/1, dir, /*writer=*/true, c10::Device(c10::kCPU));
  at::Tensor a = at::randn({32, 32});
  std::vector<std::string> written;
  for (int64_t done = 0; done < 4; ++done) {  // step 1 warms up, steps 2-3 are traced, step 4 is not
    profiler.before_step(done);
    {
      PhaseScope phase(&phases, "optimizer");
      // one distinct op per step, so the trace shows which steps it holds
      if (done == 0) at::cumsum(a, 0);
      at::mm(a, a);
      if (done == 3) at::cumprod(a, 0);
    }
    const std::string path = profiler.after_step(done + 1);
    if (!path.empty()) written.push_back(path);
  }
  ASSERT_EQ(written.size(), 1u) << "one trace, written when its last step ends";
  EXPECT_EQ(written[0], dir + "/trace_rank0.json");
  const json::Value trace = json::parse(slurp(written[0]));
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
      EXPECT_EQ(profiler.after_step(done + 1), "");
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/trace_rank0.json"));
}

}  // namespace
}  // namespace wmtp
