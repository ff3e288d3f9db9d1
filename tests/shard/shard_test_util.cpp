// Shared helpers of the sharding engine tests (toy units, metrics, communicator).
#include "shard_test_util.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>

#include "comm/mpi_communicator.h"
#include "comm/mpi_util.h"
#include "shard/sharded_model.h"
#include "model/activation_checkpoint.h"
#include "test_util.h"
#include "tiny_model.h"

namespace wmtp::test {

Communicator& world_comm() {
  static std::unique_ptr<MpiCommunicator> comm = std::make_unique<MpiCommunicator>(mpi().world());
  return *comm;
}

std::unique_ptr<ShardGroups> shard_groups(MPI_Comm world, int group_size) {
  const GroupLayout layout = plan_groups(group_size, all_gather_bytes(world, mpi().host()));
  return std::make_unique<ShardGroups>(
      make_shard_groups(world, layout, [](MPI_Comm c) { return std::make_unique<MpiCommunicator>(c); }));
}

int hybrid_test_group_size(int world_size) { return world_size == 4 ? 2 : 1; }

namespace {
bool small(const at::Tensor& t) { return t.numel() <= 64; }
}  // namespace

void CountingCommunicator::all_gather(const at::Tensor& in, const at::Tensor& out) {
  ++counts.all_gather;
  counts.small_blocking += small(out);
  world_comm().all_gather(in, out);
}
void CountingCommunicator::reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  ++counts.reduce_scatter;
  counts.small_blocking += small(in);
  world_comm().reduce_scatter(in, out, op);
}
void CountingCommunicator::all_reduce(const at::Tensor& t, ReduceOp op) {
  ++counts.all_reduce;
  counts.small_blocking += small(t);
  world_comm().all_reduce(t, op);
}
void CountingCommunicator::broadcast(const at::Tensor& t, int root) {
  ++counts.broadcast;
  counts.small_blocking += small(t);
  world_comm().broadcast(t, root);
}
void CountingCommunicator::barrier() {
  ++counts.barrier;
  ++counts.small_blocking;
  world_comm().barrier();
}
CommWorkPtr CountingCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  ++counts.all_gather_async;
  return world_comm().all_gather_async(in, out);
}
CommWorkPtr CountingCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  ++counts.reduce_scatter_async;
  return world_comm().reduce_scatter_async(in, out, op);
}
CommWorkPtr CountingCommunicator::all_reduce_async(const at::Tensor& t, ReduceOp op) {
  ++counts.all_reduce_async;
  return world_comm().all_reduce_async(t, op);
}
CommWorkPtr CountingCommunicator::broadcast_async(const at::Tensor& t, int root) {
  return world_comm().broadcast_async(t, root);
}

bool one_rank() { return world_comm().size() == 1; }

void expect_local_compute(const ShardedModel& engine, const std::string& what) {
  const ShardedModel::Counters c = engine.counters();
  const MemoryStats m = engine.memory_stats();
  EXPECT_EQ(c.gathers, 0) << what;
  EXPECT_EQ(c.regathers, 0) << what;
  EXPECT_EQ(c.prefetched, 0) << what;
  EXPECT_EQ(c.buffer_allocations, 0) << what;
  EXPECT_EQ(m.peak_gathered_bytes, 0) << what;
  EXPECT_EQ(m.peak_gathered_units, 0) << what;
}

std::vector<ParamSpec> ToyNet::specs() const {
  std::vector<ParamSpec> s;
  for (int i = 0; i < units; ++i) {
    const std::string u = "u" + std::to_string(i);
    s.push_back({u + ".W", u, {5, 5}, true});
    s.push_back({u + ".s", u, {5}, false});
    s.push_back({u + ".b", u, {5}, true});
    s.push_back({u + ".g", u, {1}, true});
  }
  return s;
}

std::unordered_map<std::string, at::Tensor> ToyNet::init(uint64_t seed) const {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::unordered_map<std::string, at::Tensor> p;
  for (const ParamSpec& s : specs()) {
    at::Tensor t = at::randn(s.shape, gen) * 0.5;
    if (s.fqn.back() == 'g' || s.fqn.back() == 's') t = t + 1.0;
    p[s.fqn] = t;
  }
  return p;
}

at::Tensor ToyNet::forward(ParamSource& src, const at::Tensor& x, bool checkpoint) const {
  at::Tensor h = x;
  for (int i = 0; i < units; ++i) {
    const std::string u = "u" + std::to_string(i);
    auto fn = [&src, u](const at::Tensor& in) {
      UnitParams p = src.begin_unit(u);
      at::Tensor y = at::gelu(at::linear(in.to(p.at(u + ".W").scalar_type()), p.at(u + ".W"), p.at(u + ".b"))) *
                     p.at(u + ".g") * p.at(u + ".s");
      p.clear();
      src.end_unit(u, y);
      return y;
    };
    h = checkpoint ? run_checkpointed(fn, h, false) : fn(h);
  }
  return h;
}

at::Tensor ToyNet::loss(ParamSource& src, const at::Tensor& x, double norm, bool checkpoint) const {
  return forward(src, x, checkpoint).to(at::kFloat).pow(2).sum() / norm;
}

at::Tensor toy_rows(uint64_t seed, int64_t total, int64_t begin, int64_t n) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randn({total, 5}, gen).narrow(0, begin, n).clone();
}

void rank_rows(int64_t total, int rank, int world, int64_t* begin, int64_t* n) {
  // weights 1, 2, ..., world: uneven shares summing to total
  int64_t wsum = static_cast<int64_t>(world) * (world + 1) / 2;
  int64_t b = 0;
  for (int r = 0; r < rank; ++r) b += total * (r + 1) / wsum;
  *begin = b;
  *n = rank == world - 1 ? total - b : total * (rank + 1) / wsum;
}

}  // namespace wmtp::test

namespace wmtp::test {

ModelArgs tiny_mtp_args() {
  ModelArgs a = tiny_args(2, 3);
  // Odd sizes, so that no flat buffer divides evenly among 3 or 4 ranks (see the header).
  a.dim = 14;
  a.n_heads = 7;
  a.n_kv_heads = 1;
  a.vocab_size = 37;
  a.multiple_of = 1;
  a.max_seq_len = 32;
  return a;
}

LoraConfig tiny_lora() {
  LoraConfig l;
  l.enabled = true;
  l.rank = 1;
  l.alpha = 2.0;
  l.targets = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};
  return l;
}

std::vector<Sequence> global_batch(uint64_t seed, int step, int n, int64_t vocab) {
  at::Generator gen = at::detail::createCPUGenerator(seed * 1000 + static_cast<uint64_t>(step));
  std::vector<Sequence> out;
  for (int i = 0; i < n; ++i) {
    Sequence s;
    int64_t len = at::randint(4, 13, {1}, gen).item<int64_t>();
    s.prompt = at::randint(1, len - 1, {1}, gen).item<int64_t>();
    at::Tensor t = at::randint(1, vocab, {len}, gen);
    s.tokens.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + len);
    out.push_back(std::move(s));
  }
  return out;
}

MtpBatch make_batch(const std::vector<Sequence>& seqs) {
  int64_t S = 1;
  for (const Sequence& s : seqs) S = std::max<int64_t>(S, static_cast<int64_t>(s.tokens.size()));
  const int64_t B = static_cast<int64_t>(seqs.size());
  MtpBatch b;
  b.tokens = at::zeros({B, S}, at::kLong);
  b.labels = at::full({B, S}, -100, at::kLong);
  for (int64_t i = 0; i < B; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(i)];
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      b.tokens[i][static_cast<int64_t>(t)] = s.tokens[t];
      if (static_cast<int64_t>(t) >= s.prompt) b.labels[i][static_cast<int64_t>(t)] = s.tokens[t];
    }
  }
  return b;
}

std::vector<MtpBatch> rank_micro_batches(const std::vector<Sequence>& global, int rank, int world, int micro) {
  std::vector<Sequence> mine;
  for (size_t i = static_cast<size_t>(rank); i < global.size(); i += static_cast<size_t>(world))
    mine.push_back(global[i]);
  std::vector<MtpBatch> out;
  for (int m = 0; m < micro; ++m) {
    size_t b = mine.size() * static_cast<size_t>(m) / static_cast<size_t>(micro);
    size_t e = mine.size() * static_cast<size_t>(m + 1) / static_cast<size_t>(micro);
    out.push_back(
        make_batch(std::vector<Sequence>(mine.begin() + static_cast<long>(b), mine.begin() + static_cast<long>(e))));
  }
  return out;
}

}  // namespace wmtp::test
