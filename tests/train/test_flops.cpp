// MFU peak: the table of known GPUs (names as cudaDeviceProp reports them), and which figure is
// used: the stated [logging] peak_tflops (no probe), a table entry for a known GPU, else the probe.
#include <gtest/gtest.h>

#include "train/flops.h"

namespace wmtp {
namespace {

TEST(KnownGpuPeaks, VendorDenseFiguresByName) {
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA H100 80GB HBM3", at::kBFloat16), 989);  // SXM
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA H100 PCIe", at::kBFloat16), 756);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA H200", at::kBFloat16), 989);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA A100-SXM4-80GB", at::kBFloat16), 312);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA A100 80GB PCIe", at::kBFloat16), 312);
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA A100-SXM4-40GB", at::kFloat), 19.5);  // fp32 without TF32
  EXPECT_EQ(known_gpu_peak_tflops("NVIDIA H100 80GB HBM3", at::kFloat), 67);
  EXPECT_EQ(known_gpu_peak_tflops("Tesla V100-SXM2-16GB", at::kBFloat16), 0);  // unknown: probe instead
  EXPECT_EQ(known_gpu_peak_tflops("cpu", at::kFloat), 0);
}

TEST(ResolvePeakFlops, StatedPeakIsUsedWithoutAProbe) {
  PeakFlops p = resolve_peak_flops(123.0, c10::Device(c10::kCPU), "cpu", at::kFloat);
  EXPECT_DOUBLE_EQ(p.flops, 123e12);
  EXPECT_EQ(p.measured, 0);
  EXPECT_EQ(p.source, "[logging] peak_tflops");
  EXPECT_EQ(p.describe(), "123 TFLOP/s ([logging] peak_tflops)");
}

TEST(ResolvePeakFlops, CpuUsesTheMeasuredMatmulAndSaysSo) {
  PeakFlops p = resolve_peak_flops(0, c10::Device(c10::kCPU), "cpu", at::kFloat, 0.05);
  EXPECT_GT(p.measured, 0);
  EXPECT_EQ(p.flops, p.measured);
  EXPECT_NE(p.source.find("measured"), std::string::npos) << p.source;
  EXPECT_NE(p.describe().find("measured matmul"), std::string::npos) << p.describe();
}

}  // namespace
}  // namespace wmtp
