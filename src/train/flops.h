// Model FLOPs for MFU. Training FLOPs per token (forward + backward = 3x forward, PaLM appendix B):
//   6 * (matmul parameters every token passes through) + 12 * L * dim * seq   (attention scores)
// For MTP every head block and the shared output projection run once per head, so the matmul
// parameters are: trunk blocks + n_future * (head block + output projection). The embedding is a
// lookup (no FLOPs). L counts trunk blocks + head blocks. Activation-checkpoint recompute is not
// counted (MFU, not HFU).
#pragma once
#include <c10/core/ScalarType.h>

#include <cstdint>

#include "model/model_args.h"

namespace wmtp {

double train_flops_per_token(const ModelArgs& args, int64_t seq_len);

// Peak matmul FLOP/s of this process in `dtype` (the compute dtype: bf16 or fp32), measured with
// square 1024 matmuls for about `seconds`. The dtype matters: on CPUs without AVX-512-BF16/AMX a
// bf16 matmul runs ~15x slower than fp32 (measured here: 2 vs 30 GFLOP/s per core on AVX2).
double measure_peak_flops(at::ScalarType dtype, double seconds = 0.5);

}  // namespace wmtp
