// One MTP micro-batch: forward, weighted CE and backward (docs/model.md) — the entry point the
// trainer calls. Two paths with the same numbers:
//   - sequential unembedding (default): trunk forward once -> z; for each head: head block on a
//     detached z, shared norm + output and CE chunked over positions, backward into z's gradient
//     (and the head's weights), logits freed; then one trunk backward. Peak loss memory is a few
//     position-chunks of one head's logits, not K heads' [B, S, V].
//   - all heads at once (the reference): logits [B, S, K, V], mtp_ce_sums, one backward.
// The "norm" and "output" units (the shared final norm and output projection) are fetched once per
// step: heads use detached copies and their accumulated gradient flows back through the
// ParamSource's tensors in one final backward together with the trunk's, after end_unit(<unit>,
// <tensor without grad>) — so an engine reduce-scatters the shared weights once, not once per head.
// The loss is normalized by `head_norm_counts` (the step's global valid counts in training):
// loss = sum over heads with count > 0 of weighted_sum_k / count_k / n_contributing_heads.
// Summing the returned `loss` over every micro-batch of every rank gives the step loss, and the
// gradients accumulated by successive calls are the gradients of that step loss.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "model/model_args.h"
#include "model/mtp.h"
#include "model/param_source.h"

namespace wmtp {

struct MtpBatch {
  at::Tensor tokens;   // [B, S] int64
  at::Tensor labels;   // [B, S] int64, -100 = ignored (prompt, padding)
  at::Tensor weights;  // undefined | [B, S] position weights | [B, S, K] per-head weights
  // Optional: `labels` on the host (the trainer keeps the collated copy). The sequential path picks
  // its rows on the host; without this copy, labels on a GPU are read back once (a host sync).
  at::Tensor labels_host = {};
};

class PhaseTimer;

struct MtpPassOptions {
  bool sequential_unembedding = true;
  bool activation_checkpointing = false;
  int64_t loss_chunk_size = 0;  // positions per CE chunk (sequential path); 0 = auto (4 chunks per head)
  bool training = true;         // dropout on
  // Where the step's time goes (core/phase_timer.h), or null: the sequential path marks
  // trunk_forward (embedding, trunk, fetching the shared norm and output), head_<k> (head k's block,
  // unembedding, CE and backward into z), trunk_backward, and host_sync (reading the loss sums).
  PhaseTimer* phases = nullptr;
  // false: the pass leaves its figures on the device (MtpPassResult::figures) and fills only
  // `count` on the host, so a training step can read every micro-batch's figures at once.
  bool read_sums = true;
};
MtpPassOptions mtp_pass_options(const ModelConfig& cfg);

struct MtpPassResult {
  double loss = 0.0;                   // this micro-batch's share of the normalized loss
  std::vector<double> weighted_sum;    // per head: sum(ce * w * m) over this micro-batch
  std::vector<double> unweighted_sum;  // per head: sum(ce * m)
  std::vector<int64_t> count;          // per head: sum(m)
  // The same figures on the device, [2K + 1] double: weighted_sum, unweighted_sum, loss.
  at::Tensor figures;
};

// Forward + backward; gradients accumulate into whatever the ParamSource's tensors lead to.
// head_norm_counts has n_future entries. Runs every head even when its count is 0 (so collectives
// inside a ParamSource stay in step across ranks).
MtpPassResult mtp_forward_backward(const MtpModel& model, ParamSource& src, const MtpBatch& batch,
                                   const std::vector<double>& head_norm_counts, const MtpPassOptions& opt);
// The same with the counts as a [K] tensor on any device (e.g. counted on the device: nothing waits
// for them).
MtpPassResult mtp_forward_backward(const MtpModel& model, ParamSource& src, const MtpBatch& batch,
                                   const at::Tensor& head_norm_counts, const MtpPassOptions& opt);

// Forward only, no grad (validation): per-head sums/counts, loss normalized by this batch's own
// counts. Uses the sequential, chunked path (memory), dropout off.
MtpPassResult mtp_forward_loss(const MtpModel& model, ParamSource& src, const MtpBatch& batch,
                               const MtpPassOptions& opt);

// Forward only, no grad: every head's per-token CE by source position, [B, S, K] float32 on the
// tokens' device: out[b, t, k-1] = CE(head k at t -> labels[b, t+k]), 0 where t >= S-k or the
// target is ignored (rho1's excess loss; K = 1 gives a next-token reference's CE). Runs the units in
// mtp_forward_loss's order, one head at a time, chunked over positions: O(V) memory per chunk.
// Dropout follows opt.training; batch.weights is ignored.
at::Tensor mtp_token_ce(const MtpModel& model, ParamSource& src, const MtpBatch& batch, const MtpPassOptions& opt);

}  // namespace wmtp
