// MFU: the one FLOP count (6 * parameters, the parameters counted from the model's own specs here),
// the table of known GPUs (names as cudaDeviceProp reports them), and which peak is used: the stated
// [logging] peak_tflops (no probe), a table entry for a known GPU, else the probe.
#include <gtest/gtest.h>

#include "model/mtp.h"
#include "train/flops.h"

namespace wmtp {
namespace {

int64_t spec_numel(const ModelArgs& a) {
  int64_t n = 0;
  for (const ParamSpec& s : MtpModel(a).param_specs()) n += s.numel();
  return n;
}

TEST(ModelFlops, SixTimesTheParametersTheModelDeclares) {
  ModelArgs a;  // the 1B MTP config of the GPU bench: 953,223,168 parameters (its --dry-run total)
  a.dim = 2048, a.n_layers = 16, a.n_heads = 16, a.vocab_size = 32000, a.n_future_tokens = 4, a.multiple_of = 256;
  EXPECT_EQ(model_param_count(a), 953223168);
  EXPECT_EQ(model_param_count(a), spec_numel(a));
  EXPECT_DOUBLE_EQ(train_flops_per_token(a), 6.0 * 953223168);
  ModelArgs g;  // grouped-query attention, an FFN multiplier, one head
  g.dim = 96, g.n_layers = 3, g.n_heads = 6, g.n_kv_heads = 2, g.vocab_size = 77, g.n_future_tokens = 1;
  g.multiple_of = 32, g.ffn_dim_multiplier = 1.3;
  EXPECT_EQ(model_param_count(g), spec_numel(g));
  EXPECT_DOUBLE_EQ(train_flops_per_token(g), 6.0 * double(spec_numel(g)));
}

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
