// FLOP accounting for MFU, the start-up peak measurement, and the table of known GPU peaks.
#include "train/flops.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>

#include "core/timer.h"
#include "comm/device.h"

namespace wmtp {

int64_t model_param_count(const ModelArgs& a) {
  const int64_t D = a.dim, HE = a.n_heads * a.head_dim(), GE = a.kv_heads() * a.head_dim(), F = ffn_hidden_dim(a);
  const int64_t block = 2 * D * HE + 2 * D * GE + 3 * D * F + 2 * D;  // wq wo, wk wv, w1 w2 w3, two norms
  return 2 * a.vocab_size * D + a.n_layers * block + D;               // + the final norm
}

double train_flops_per_token(const ModelArgs& a) { return 6.0 * double(model_param_count(a)); }

std::vector<double> time_matmul_rounds(at::ScalarType dtype, c10::Device device, double seconds, int64_t n) {
  // Size: a 1024 matmul reached ~43 GFLOP/s on the 2-core CI machine where 2048-4096 reach 106-128
  // (blocking and threading overheads dominate small matmuls), which inflated CPU MFU ~2.5x. 2048 is
  // within a few percent of 4096 there at an eighth of the cost per call. GPUs need 8192 to fill.
  if (n <= 0) n = device.is_cpu() ? 2048 : 8192;
  const auto opt = at::TensorOptions().dtype(dtype).device(device);
  at::Tensor a = at::randn({n, n}, opt.dtype(at::kFloat)).to(dtype);
  at::Tensor b = at::randn({n, n}, opt.dtype(at::kFloat)).to(dtype);
  at::Tensor c = at::mm(a, b);  // warm-up: kernel selection, thread pool start, GPU clocks
  synchronize(device);
  const double flop = 2.0 * double(n) * double(n) * double(n);
  // On a GPU a round is a batch of matmuls between synchronizations (launch latency hidden).
  const int per_round = device.is_cpu() ? 1 : 10;
  std::vector<double> rates;
  Timer total;
  for (int round = 0; round < 3 || total.seconds() < seconds; ++round) {
    Timer t;
    for (int i = 0; i < per_round; ++i) at::mm_out(c, a, b);
    synchronize(device);
    rates.push_back(flop * per_round / std::max(t.seconds(), 1e-9));
    if (round >= 100) break;
  }
  return rates;
}

double measure_peak_flops(at::ScalarType dtype, c10::Device device, double seconds) {
  // Best of several timed rounds: the machine's peak, not its average under other jobs' load.
  const std::vector<double> rates = time_matmul_rounds(dtype, device, seconds);
  return *std::max_element(rates.begin(), rates.end());
}

namespace {
struct KnownGpu {
  const char* name_has;  // substring of cudaDeviceProp::name
  const char* not_has;   // excluded substring ("" = none)
  double bf16_tflops;    // dense tensor-core bf16
  double fp32_tflops;    // plain fp32 (LibTorch leaves TF32 off for matmuls)
};
// Vendor datasheet dense figures. First match wins: specific variants before the generic name.
const KnownGpu kKnownGpus[] = {
    {"H100 PCIe", "", 756, 51}, {"H100 NVL", "", 835, 60}, {"H100", "", 989, 67},  // SXM ("NVIDIA H100 80GB HBM3")
    {"H200", "", 989, 67},      {"A100", "", 312, 19.5},
};
}  // namespace

double known_gpu_peak_tflops(const std::string& device_name, at::ScalarType dtype) {
  for (const KnownGpu& g : kKnownGpus) {
    if (device_name.find(g.name_has) == std::string::npos) continue;
    if (*g.not_has && device_name.find(g.not_has) != std::string::npos) continue;
    return dtype == at::kBFloat16 || dtype == at::kHalf ? g.bf16_tflops : g.fp32_tflops;
  }
  return 0;
}

std::string PeakFlops::describe() const {
  char buf[320];
  if (measured > 0)
    snprintf(buf, sizeof(buf), "%.3g TFLOP/s (%s); measured matmul %.3g TFLOP/s", flops / 1e12, source.c_str(),
             measured / 1e12);
  else
    snprintf(buf, sizeof(buf), "%.3g TFLOP/s (%s)", flops / 1e12, source.c_str());
  return buf;
}

double measure_peak_flops(at::ScalarType dtype, double seconds) {
  return measure_peak_flops(dtype, c10::Device(c10::kCPU), seconds);
}

PeakFlops resolve_peak_flops(double configured_tflops, c10::Device device, const std::string& device_name,
                             at::ScalarType dtype, double probe_seconds) {
  PeakFlops p;
  if (configured_tflops > 0) {  // stated: no start-up probe (tests and benches state it to save the time)
    p.flops = configured_tflops * 1e12;
    p.source = "[logging] peak_tflops";
    return p;
  }
  p.measured = measure_peak_flops(dtype, device, probe_seconds);
  const double table = device.is_cpu() ? 0 : known_gpu_peak_tflops(device_name, dtype);
  if (table > 0) {
    p.flops = table * 1e12;
    p.source = "table: " + device_name + " " + c10::toString(dtype) + " dense";
  } else {
    p.flops = p.measured;
    p.source = device.is_cpu() ? "measured matmul, CPU" : "measured matmul; " + device_name + " is not in the table";
  }
  return p;
}

}  // namespace wmtp
