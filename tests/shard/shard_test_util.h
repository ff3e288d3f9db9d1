// Helpers for the sharding engine tests: the world communicator, a relative-difference metric, and
// a toy model of linear/GELU units with trainable and frozen parameters whose sizes are divisible
// by neither 3 nor 4 (so every world size pads and parameters straddle shard boundaries).
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "comm/shard_groups.h"
#include "model/param_source.h"
#include "model/param_spec.h"

namespace wmtp {
class ShardedModel;
}

namespace wmtp::test {

Communicator& world_comm();

// Hybrid sharding's group and replica communicators (MPI) over `world`, in groups of `group_size`
// ranks (checked against every rank's host, as a run's are).
std::unique_ptr<ShardGroups> shard_groups(MPI_Comm world, int group_size);
// The groups the hybrid tests use at this world size: 2 x 2 at np 4 (sharded in groups, replicated
// across them), groups of one rank below (the replicas' all-reduce alone).
int hybrid_test_group_size(int world_size);

// At one rank the engine holds whole units and computes on its local buffers (or their param_dtype
// copy): nothing is gathered, released, re-gathered or prefetched, and no gathered memory is ever
// counted. The tests of the gathering machinery check this instead at np 1.
bool one_rank();
void expect_local_compute(const ShardedModel& engine, const std::string& what = "");

// Forwards every call to world_comm() and counts them: blocking and non-blocking calls of each kind,
// and "small" blocking ones (at most 64 elements: scalars and statistics).
class CountingCommunicator final : public Communicator {
 public:
  struct Counts {
    int all_gather = 0, reduce_scatter = 0, all_reduce = 0, broadcast = 0, barrier = 0;
    int all_gather_async = 0, reduce_scatter_async = 0, all_reduce_async = 0;
    int small_blocking = 0;
  };
  Counts counts;
  int rank() const override { return world_comm().rank(); }
  int size() const override { return world_comm().size(); }
  std::string backend() const override { return world_comm().backend(); }
  void all_gather(const at::Tensor& in, const at::Tensor& out) override;
  void reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  void all_reduce(const at::Tensor& t, ReduceOp op) override;
  void broadcast(const at::Tensor& t, int root) override;
  void barrier() override;
  CommWorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) override;
  CommWorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  CommWorkPtr all_reduce_async(const at::Tensor& t, ReduceOp op) override;
  CommWorkPtr broadcast_async(const at::Tensor& t, int root) override;
};

// Units "u0".."u{n-1}": y = gelu(x W^T + b) * g * s with W [5, 5], b [5], g [1] trainable (31
// elements) and s [5] frozen. loss = sum(y_last^2) / norm.
struct ToyNet {
  int units = 3;
  std::vector<ParamSpec> specs() const;
  std::unordered_map<std::string, at::Tensor> init(uint64_t seed) const;
  at::Tensor forward(ParamSource& src, const at::Tensor& x, bool checkpoint) const;
  at::Tensor loss(ParamSource& src, const at::Tensor& x, double norm, bool checkpoint) const;
};

// Rows [begin, begin + n) of a fixed [total, 5] input drawn from `seed`.
at::Tensor toy_rows(uint64_t seed, int64_t total, int64_t begin, int64_t n);
// This rank's share of `total` rows: uneven (rank r gets more than rank r-1 when possible).
void rank_rows(int64_t total, int rank, int world, int64_t* begin, int64_t* n);

}  // namespace wmtp::test

#include "model/mtp.h"
#include "model/mtp_pass.h"

namespace wmtp::test {

// Tiny MTP model: dim 14, 7 heads over 1 kv head (head_dim 2), vocab 37, ffn 37, n_layers 5 with
// n_future 3 (trunk 2 blocks, head 0 = layers.2, extra_heads.0..1). Block 2366 elements, LoRA
// (rank 1, every projection) 241, embedding 518: none divisible by 3 or 4.
ModelArgs tiny_mtp_args();
LoraConfig tiny_lora();

// One sequence: tokens and its prompt length (labels are the tokens, -100 over the prompt).
struct Sequence {
  std::vector<int64_t> tokens;
  int64_t prompt = 0;
};
// The global batch of optimizer step `step`: `n` sequences of lengths 4..12 and prompts 1..L-2.
std::vector<Sequence> global_batch(uint64_t seed, int step, int n, int64_t vocab);
// Right-padded batch (pad token 0, label -100).
MtpBatch make_batch(const std::vector<Sequence>& seqs);
// items[rank::world] of the global list, split into `micro` consecutive micro-batches.
std::vector<MtpBatch> rank_micro_batches(const std::vector<Sequence>& global, int rank, int world, int micro);

}  // namespace wmtp::test
