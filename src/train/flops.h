// Model FLOPs for MFU. Training FLOPs per token (forward + backward = 3x forward, PaLM appendix B):
//   6 * (matmul parameters every token passes through) + 12 * L * dim * seq   (attention scores)
// For MTP every head block and the shared output projection run once per head, so the matmul
// parameters are: trunk blocks + n_future * (head block + output projection). The embedding is a
// lookup (no FLOPs). L counts trunk blocks + head blocks. Activation-checkpoint recompute is not
// counted (MFU, not HFU).
#pragma once
#include <cstdint>

#include "model/model_args.h"

namespace wmtp {

double train_flops_per_token(const ModelArgs& args, int64_t seq_len);

// Peak bf16 matmul FLOP/s of this process, measured with square matmuls for about `seconds`.
double measure_peak_flops(double seconds = 0.5);

}  // namespace wmtp
