// Model FLOPs and the peak they are measured against (MFU).
//
// Training FLOPs per token (forward + backward = 3x forward, PaLM appendix B):
//   6 * (matmul parameters every token passes through) + 12 * L * dim * seq   (attention scores)
// For MTP every head block and the shared output projection run once per head, so the matmul
// parameters are: trunk blocks + n_future * (head block + output projection). The embedding is a
// lookup (no FLOPs). L counts trunk blocks + head blocks. Activation-checkpoint recompute is not
// counted (MFU, not HFU).
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

#include "model/model_args.h"

namespace wmtp {

double train_flops_per_token(const ModelArgs& args, int64_t seq_len);

// Matmul FLOP/s of this process on `device` in `dtype` (the compute dtype: bf16 or fp32), the best
// rate of square matmuls large enough to reach the machine's matmul peak (CPU: 2048, GPU: 8192),
// timed for about `seconds` after a warm-up. The dtype matters: on CPUs without AVX-512-BF16/AMX a
// bf16 matmul runs ~15x slower than fp32 (measured here: 2 vs 30 GFLOP/s per core on AVX2).
double measure_peak_flops(at::ScalarType dtype, c10::Device device, double seconds = 0.5);
double measure_peak_flops(at::ScalarType dtype, double seconds = 0.5);  // on the CPU

// Vendor dense peak in TFLOP/s of a GPU called `device_name` (cudaDeviceProp::name, e.g. "NVIDIA
// H100 80GB HBM3") for matmuls in `dtype` (bf16 on tensor cores; fp32 without TF32); 0 if unknown.
double known_gpu_peak_tflops(const std::string& device_name, at::ScalarType dtype);

struct PeakFlops {
  double flops = 0;      // per rank, what MFU divides by
  double measured = 0;   // timed matmul FLOP/s, printed beside (0 when the peak was stated)
  std::string source;    // "[logging] peak_tflops", "table: NVIDIA H100 80GB HBM3 bf16", "measured matmul"
  std::string describe() const;  // "989.0 TFLOP/s (table: ...); measured matmul 702.3 TFLOP/s"
};
PeakFlops resolve_peak_flops(double configured_tflops, c10::Device device, const std::string& device_name,
                             at::ScalarType dtype, double probe_seconds = 0.5);

}  // namespace wmtp
