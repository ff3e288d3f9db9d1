// bench-peak-flops: the MFU peak probe against the matmuls it stands for, side by side. Prints, per
// round, a short probe (1024 matmuls averaged over 0.3 s, no warm-up round: what a naive start-up
// probe measures), wmtp's probe (measure_peak_flops: best 2048 matmul after a warm-up), and plain
// 2048/4096 matmuls timed here;
// then each probe's ratio to the best large matmul (1.00 = the probe reports the machine's peak).
// Rounds alternate so load from other jobs hits all alike.
// Usage: bench-peak-flops [--rounds N] [--dtype fp32|bf16] [--threads T] [--device cpu|cuda]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "comm/device.h"
#include "train/flops.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The short probe: n = 1024, mean rate over ~0.3 s, no separate warm-up round.
double short_probe(at::ScalarType dt, c10::Device dev) {
  const int64_t n = 1024;
  at::Tensor a = at::randn({n, n}).to(dt).to(dev), b = at::randn({n, n}).to(dt).to(dev);
  at::mm(a, b);
  wmtp::synchronize(dev);
  auto t0 = std::chrono::steady_clock::now();
  int64_t iters = 0;
  while (seconds_since(t0) < 0.3 || iters < 3) {
    at::mm(a, b);
    ++iters;
  }
  wmtp::synchronize(dev);
  return 2.0 * n * n * n * double(iters) / seconds_since(t0);
}

// Best of `reps` single n x n matmuls after one warm-up.
double matmul_rate(int64_t n, int reps, at::ScalarType dt, c10::Device dev) {
  at::Tensor a = at::randn({n, n}).to(dt).to(dev), b = at::randn({n, n}).to(dt).to(dev);
  at::Tensor c = at::mm(a, b);
  wmtp::synchronize(dev);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    at::mm_out(c, a, b);
    wmtp::synchronize(dev);
    best = std::max(best, 2.0 * n * n * n / seconds_since(t0));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3, threads = 0;
  std::string dtype = "fp32", device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dtype"))
      dtype = argv[i + 1];
    else if (!strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--device"))
      device = argv[i + 1];
    else {
      fprintf(stderr, "usage: bench-peak-flops [--rounds N] [--dtype fp32|bf16] [--threads T] [--device cpu|cuda]\n");
      return 2;
    }
  }
  if (threads > 0) at::set_num_threads(threads);
  const at::ScalarType dt = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  const c10::Device dev = device == "cuda" ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  const int64_t big = dev.is_cpu() ? 4096 : 16384;
  printf("bench-peak-flops: %s %s, %d threads; GFLOP/s per round\n", wmtp::device_name(dev).c_str(), dtype.c_str(),
         at::get_num_threads());
  printf("%-6s %12s %12s %12s %12s %10s %10s\n", "round", "short probe", "wmtp probe", "mm 2048", "mm big",
         "short/best", "wmtp/best");
  double s_old = 0, s_new = 0, s_best = 0;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    const double o = short_probe(dt, dev);
    const double t_old = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    const double p = wmtp::measure_peak_flops(dt, dev, 0.5);
    const double t_new = seconds_since(t0);
    const double m2 = matmul_rate(2048, 3, dt, dev);
    const double mb = matmul_rate(big, 2, dt, dev);
    const double best = std::max(m2, mb);
    s_old += o / best, s_new += p / best, s_best += 1;
    printf("%-6d %12.1f %12.1f %12.1f %12.1f %10.2f %10.2f   (probe time: short %.2f s, wmtp %.2f s)\n", r, o / 1e9,
           p / 1e9, m2 / 1e9, mb / 1e9, o / best, p / best, t_old, t_new);
  }
  printf("mean ratio to the best large matmul: short probe %.2f, wmtp probe %.2f (big = %lld)\n", s_old / s_best,
         s_new / s_best, (long long)big);
  return 0;
}
