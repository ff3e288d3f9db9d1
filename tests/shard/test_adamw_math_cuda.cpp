// On a GPU: adamw_update on CUDA ranges (LibTorch's fused multi-tensor kernel, or the op chain with
// LibTorch < 2.1) equals the host variant on the same values over several steps; and the phase
// timer's CUDA events time work queued on the current stream.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "core/phase_timer.h"
#include "rel_diff.h"
#include "shard/adamw_math.h"

namespace wmtp {
namespace {

using test::rel_diff;

const c10::Device kGpu(c10::kCUDA, 0);

TEST(AdamWMathCuda, DeviceUpdateEqualsTheHostVariant) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const std::vector<int64_t> sizes = {3, 65536 + 7, 1 << 18};
  std::vector<at::Tensor> hp, hm, hv, dp, dm, dv;
  for (int64_t n : sizes) {
    hp.push_back(at::randn({n}, gen)), hm.push_back(at::zeros({n})), hv.push_back(at::zeros({n}));
    dp.push_back(hp.back().to(kGpu)), dm.push_back(hm.back().to(kGpu)), dv.push_back(hv.back().to(kGpu));
  }
  for (int64_t step = 1; step <= 3; ++step) {
    const AdamWHyper h{1e-3 * double(step), 0.9, 0.95, 1e-8, 0.1, step};
    AdamWRanges host, dev;
    for (size_t i = 0; i < sizes.size(); ++i) {
      at::Tensor g = at::randn({sizes[i]}, gen);
      host.add(hp[i], g, hm[i], hv[i]);
      dev.add(dp[i], g.to(kGpu), dm[i], dv[i]);
    }
    adamw_update(host, h);
    adamw_update(dev, h);
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_LE(rel_diff(dp[i], hp[i]), 1e-6) << "step " << step << " range " << i;
      EXPECT_LE(rel_diff(dm[i], hm[i]), 1e-6) << "step " << step << " range " << i;
      EXPECT_LE(rel_diff(dv[i], hv[i]), 1e-6) << "step " << step << " range " << i;
    }
  }
}

TEST(PhaseTimerCuda, EventsTimeTheQueuedWork) {
  PhaseTimer timer(/*heads=*/1, kGpu);
  at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(kGpu));
  {
    PhaseScope s(&timer, Phase::Optimizer);
    for (int i = 0; i < 10; ++i) a = at::mm(a, a).div_(4096.0);
  }
  std::vector<PhaseTotal> t = timer.take();  // waits for the events
  const size_t mm = static_cast<size_t>(Phase::Optimizer), idle = static_cast<size_t>(Phase::Clip);
  ASSERT_EQ(t[mm].name, "optimizer");
  EXPECT_GT(t[mm].seconds, 0.0);
  EXPECT_EQ(t[mm].count, 1);
  EXPECT_EQ(t[idle].seconds, 0.0);
  EXPECT_EQ(timer.take()[mm].seconds, 0.0) << "take() starts afresh";
}

}  // namespace
}  // namespace wmtp
