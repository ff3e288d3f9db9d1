// Model FLOPs and the peak they are measured against (MFU): the one definition wmtp uses, in the
// trainer (perf/mfu_pct), the benches and the docs.
//
// Training FLOPs per token = 6 * N, N = the model's parameters, each tensor counted once (token
// embedding, every block, the final norm, the output projection): the "6·N·T" convention of
// PaLM / Chinchilla that published MFU figures quote. Deliberately left out, so figures stay
// comparable with other trainers: attention scores and values (12 * L * dim * seq per token: +14 %
// for the 1B MTP config at seq 2048), the K - 1 extra passes of an MTP model's shared output
// projection (one per further head: +20 % there), and activation-checkpoint recompute (MFU, not HFU).
// The figure is therefore a lower bound on the arithmetic wmtp does; docs/gpu.md gives both.
// Forward-only work (a frozen model's scoring pass) is a third of it: 2 * N.
//
// Peak: `[logging] peak_tflops` when set; else, on a GPU, the vendor's dense figure for the compute
// dtype from a table of known GPUs by name (H100 SXM / H200: 989 TFLOP/s bf16; A100: 312); else (CPU,
// unknown GPU) a matmul timed at start-up. Unless the peak was stated, the timed figure is reported
// beside the one used.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_args.h"

namespace wmtp {

// N for a base MTP model of these arguments (no LoRA adapters, no value head): 2 * vocab * dim
// (embedding, output) + n_layers blocks + the final norm.
int64_t model_param_count(const ModelArgs& args);
// 6 * model_param_count(args).
double train_flops_per_token(const ModelArgs& args);

// Matmul FLOP/s of this process on `device` in `dtype` (the compute dtype: bf16 or fp32), the best
// rate of square matmuls large enough to reach the machine's matmul peak (CPU: 2048, GPU: 8192),
// timed for about `seconds` after a warm-up. The dtype matters: on CPUs without AVX-512-BF16/AMX a
// bf16 matmul runs ~15x slower than fp32 (measured here: 2 vs 30 GFLOP/s per core on AVX2).
double measure_peak_flops(at::ScalarType dtype, c10::Device device, double seconds = 0.5);
double measure_peak_flops(at::ScalarType dtype, double seconds = 0.5);  // on the CPU
// The same matmuls' FLOP/s round by round (at least 3 rounds, then until `seconds` have passed),
// for a figure other than the best: bin/calibrate-machine takes the median, the rate a rank
// sustains while the other ranks of its node compute too. `n` = 0: the size above.
std::vector<double> time_matmul_rounds(at::ScalarType dtype, c10::Device device, double seconds, int64_t n = 0);

// Vendor dense peak in TFLOP/s of a GPU called `device_name` (cudaDeviceProp::name, e.g. "NVIDIA
// H100 80GB HBM3") for matmuls in `dtype` (bf16 on tensor cores; fp32 without TF32); 0 if unknown.
double known_gpu_peak_tflops(const std::string& device_name, at::ScalarType dtype);

struct PeakFlops {
  double flops = 0;              // per rank, what MFU divides by
  double measured = 0;           // timed matmul FLOP/s, printed beside (0 when the peak was stated)
  std::string source;            // "[logging] peak_tflops", "table: NVIDIA H100 80GB HBM3 bf16", "measured matmul"
  std::string describe() const;  // "989.0 TFLOP/s (table: ...); measured matmul 702.3 TFLOP/s"
};
PeakFlops resolve_peak_flops(double configured_tflops, c10::Device device, const std::string& device_name,
                             at::ScalarType dtype, double probe_seconds = 0.5);

}  // namespace wmtp
