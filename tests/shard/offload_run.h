// The offload tests' runner (CPU and CUDA): `steps` AdamW steps of the tiny MTP model on `device`
// under a [sharding] config (a hybrid one in MPI groups over the world), two micro-batches per rank, loss normalized by global counts; what a
// checkpoint would hold (this rank's owned pieces of parameters and moments) and every step's loss.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "core/tensor_piece.h"
#include "model/mtp_loss.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "shard_test_util.h"

namespace wmtp::test {

struct OffloadRun {
  std::vector<double> losses;
  std::vector<TensorPiece> params, exp_avg, exp_avg_sq;  // CPU copies of this rank's owned pieces
  MemoryStats memory;                                    // before the last optimizer step
  ShardedModel::Counters last_step;
};

inline std::vector<TensorPiece> host_copies(const std::vector<TensorPiece>& pieces) {
  std::vector<TensorPiece> out;
  for (const TensorPiece& p : pieces) out.push_back({p.name, p.offset, p.data.to(at::kCPU).clone()});
  return out;
}

inline OffloadRun run_offload(const ShardingConfig& sc, Communicator& comm, c10::Device device, int steps,
                              bool lora = false, bool checkpoint = false) {
  const uint64_t seed = 43;
  MtpModel model(tiny_mtp_args(), lora ? tiny_lora() : LoraConfig{});
  // Hybrid: MPI groups over the world (hybrid_test_group_size).
  const std::unique_ptr<ShardGroups> groups = is_hybrid(sc.strategy)
                                                  ? shard_groups(MPI_COMM_WORLD, hybrid_test_group_size(comm.size()))
                                                  : nullptr;
  ShardedModel engine(model.param_specs(), comm, sc, device, groups.get());
  engine.init_shards(
      [&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, seed); });
  OptimizerConfig oc;
  oc.lr = 1e-3;
  oc.weight_decay = 0.1;
  oc.max_grad_norm = 0.5;
  ShardedAdamW opt(engine, oc);
  MtpPassOptions so;
  so.activation_checkpointing = checkpoint;
  OffloadRun r;
  for (int s = 0; s < steps; ++s) {
    auto micro = rank_micro_batches(global_batch(seed, s, 16, model.args().vocab_size), comm.rank(), comm.size(), 2);
    at::Tensor counts = at::zeros({model.n_future()}, at::kLong);
    for (const MtpBatch& b : micro) counts += at::tensor(count_valid_targets(b.labels, model.n_future()), at::kLong);
    comm.all_reduce(counts, ReduceOp::Sum);
    const std::vector<double> c(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
    engine.reset_counters();
    opt.zero_grad();
    at::Tensor loss = at::zeros({1}, at::kDouble);
    for (MtpBatch b : micro) {
      b.tokens = b.tokens.to(device);
      b.labels = b.labels.to(device);
      loss += mtp_forward_backward(model, engine, b, c, so).loss;
    }
    opt.clip_grad_norm(oc.max_grad_norm, &loss);        // sums the loss over ranks in the same collective
    if (s + 1 == steps) r.memory = opt.memory_stats();  // before the step: every copy of this step alive
    opt.step();
    r.losses.push_back(loss.item<double>());
    r.last_step = engine.counters();
  }
  r.params = host_copies(engine.trainable_pieces());
  r.exp_avg = host_copies(opt.state_pieces(AdamState::ExpAvg));
  r.exp_avg_sq = host_copies(opt.state_pieces(AdamState::ExpAvgSq));
  return r;
}

// Number of pieces whose bytes differ (0: the checkpoints would hold the same bits).
inline int differing_pieces(const std::vector<TensorPiece>& a, const std::vector<TensorPiece>& b) {
  if (a.size() != b.size()) return static_cast<int>(std::max(a.size(), b.size()));
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    n += a[i].name != b[i].name || a[i].offset != b[i].offset || !at::equal(a[i].data, b[i].data);
  return n;
}

}  // namespace wmtp::test
