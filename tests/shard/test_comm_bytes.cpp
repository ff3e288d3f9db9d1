// Bytes by link (comm/link_bytes.h) of one optimizer step through the engine (mpirun -np 4), for every
// strategy x param_dtype x reduce_dtype (x no_sync), held to the formulas written here, with the
// padding: the toy units hold 31 trainable and 5 frozen elements, padded to 32 and 8 at 4 ranks.
// The job's hosts are given as A A B B (ranks 0-1 on one node, 2-3 on another), so that both link
// classes carry traffic: the world's ring crosses nodes from rank 1 to 2 and from 3 to 0, the groups
// of 2 of the hybrid strategies stay inside a node, their replicas {0, 2} and {1, 3} are across.
//
// One step = 2 micro-batches forward and backward, the gradient norm's all-reduce (one double over
// every rank) and the AdamW update (no traffic). Gathers per unit and micro-batch: 2 under full_shard
// and hybrid_shard (forward, and again before the unit's backward: no prefetch, no unit kept), 1 under
// the _grad_op strategies (kept from forward to backward), none under no_shard. Every collective
// counts what a ring sends: an all-gather or reduce-scatter over n ranks (n-1) blocks, an all-reduce
// 2(n-1) chunks, all to the rank's successor. MPI widens bf16 reductions to fp32 on the wire. The
// hybrid strategies' 2 replicas sum their group shards with one all-reduce per unit and step.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <sstream>

#include "comm/link_bytes.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_util.h"
#include "comm/shard_groups.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "shard_test_util.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

constexpr int kRanks = 4;
constexpr int64_t kUnits = 3, kMicro = 2, kRows = 13;
constexpr int64_t kTrainable = 32, kFrozen = 8;  // 31 and 5 elements per unit, padded to a multiple of 4
const std::vector<std::string> kHosts = {"A", "A", "B", "B"};

// Elements a rank sends in a ring all-reduce of `numel` elements over `n` ranks, step by step: the
// chunks are numel split in n (the first numel % n one larger); in the reduce-scatter phase rank r
// sends chunk r - k at step k, in the all-gather phase chunk r + 1 - k (k = 0 .. n-2).
int64_t ring_all_reduce_elements(int n, int rank, int64_t numel) {
  auto chunk = [&](int i) {
    i = ((i % n) + n) % n;
    return numel / n + (i < numel % n ? 1 : 0);
  };
  int64_t sent = 0;
  for (int k = 0; k + 1 < n; ++k) sent += chunk(rank - k) + chunk(rank + 1 - k);
  return sent;
}

struct Case {
  std::string strategy, param, reduce;
  bool no_sync = false;
  std::string name() const { return strategy + " param " + param + " reduce " + reduce + (no_sync ? " no_sync" : ""); }
};

// What rank `rank` sends in one step of `c`, by link, from the formulas above.
LinkBytes expected_bytes(const Case& c, int rank) {
  const bool hybrid = c.strategy.rfind("hybrid", 0) == 0;
  const int64_t es_param = c.param == "bf16" ? 2 : 4;
  const int64_t es_reduce = c.reduce == "bf16" ? 2 : 4;  // a reduced block sent on as it is
  const int64_t es_wire = 4;                             // MPI reduces bf16 widened to fp32
  const int group = hybrid ? 2 : kRanks, replicas = kRanks / group;
  // The link to the successor in the world's ring and in the group's: A A B B.
  const bool world_next_inter = rank == 1 || rank == 3;
  const bool group_next_inter = hybrid ? false : world_next_inter;
  LinkBytes b;
  auto add = [&](bool inter, int64_t bytes) { (inter ? b.inter : b.intra) += bytes; };

  const int64_t gathers = c.strategy == "no_shard" ? 0 : (c.strategy.find("grad_op") != std::string::npos ? 1 : 2);
  add(group_next_inter, kUnits * kMicro * gathers * (group - 1) * (kTrainable + kFrozen) / group * es_param);
  const int64_t reductions = c.no_sync ? 1 : kMicro;  // no_sync: once per step, of the accumulated gradient
  if (c.strategy == "no_shard")  // a reduce-scatter over every rank, then an all-gather of the reduced blocks
    add(world_next_inter, kUnits * reductions * (kRanks - 1) * kTrainable / kRanks * (es_wire + es_reduce));
  else
    add(group_next_inter, kUnits * reductions * (group - 1) * kTrainable / group * es_wire);
  // Once per step, the group shard across the replicas: two replicas, one all-reduce of it (a single
  // sum per element, the same bits on both); more, a reduce-scatter and an all-gather.
  if (hybrid && replicas == 2)
    add(true, kUnits * ring_all_reduce_elements(replicas, rank / group, kTrainable / group) * es_wire);
  else if (hybrid)
    add(true, kUnits * (replicas - 1) * kTrainable / kRanks * (es_wire + es_reduce));
  add(world_next_inter, ring_all_reduce_elements(kRanks, rank, 1) * 8);  // the gradient norm, a double
  return b;
}

struct Counted {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<LinkCounting> counting;
  std::unique_ptr<MpiCommunicator> world;
  Counted() {
    MPI_Comm_dup(mpi().world(), &comm);
    counting = std::make_unique<LinkCounting>(comm, kHosts);
    world = std::make_unique<MpiCommunicator>(comm);  // a duplicate: it counts
  }
  ~Counted() {
    world.reset();
    counting.reset();
    MPI_Comm_free(&comm);
  }
};

TEST(CommBytes, OneStepOfEveryStrategyAndDtypeMatchesTheFormulas) {
  ASSERT_EQ(mpi().world_size(), kRanks) << "the hosts A A B B need 4 ranks";
  Counted counted;
  const LinkCounter& counter = *counted.counting->counter();
  const int rank = counted.world->rank();
  ToyNet net;
  std::vector<Case> cases;
  for (std::string strategy : {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_grad_op"})
    for (std::string param : {"fp32", "bf16"})
      for (std::string reduce : {"fp32", "bf16"})
        for (bool no_sync : {false, true}) cases.push_back({strategy, param, reduce, no_sync});
  std::ostringstream failures;
  for (const Case& c : cases) {
    ShardingConfig sc;
    set_config(sc, "strategy=" + c.strategy);
    set_config(sc, "param_dtype=" + c.param);
    set_config(sc, "reduce_dtype=" + c.reduce);
    sc.no_sync = c.no_sync;
    sc.prefetch = false;
    sc.keep_immediate = false;
    const bool hybrid = is_hybrid(sc.strategy);
    std::unique_ptr<ShardGroups> groups;
    if (hybrid)
      groups = std::make_unique<ShardGroups>(make_shard_groups(counted.comm, plan_groups(2, kHosts), [](MPI_Comm m) {
        return std::make_unique<MpiCommunicator>(m);
      }));
    ShardedModel engine(net.specs(), *counted.world, sc, c10::Device(c10::kCPU), groups.get());
    engine.load_full(net.init(3));
    ShardedAdamW opt(engine, OptimizerConfig{});
    int64_t begin, n;
    rank_rows(kRows, rank, kRanks, &begin, &n);
    const at::Tensor x = toy_rows(4, kRows, begin, n);

    const LinkBytes before = counter.total();
    opt.zero_grad();
    for (int m = 0; m < kMicro; ++m) {
      const int64_t b = n * m / kMicro, e = n * (m + 1) / kMicro;
      net.loss(engine, x.narrow(0, b, e - b), kRows, false).backward();
    }
    opt.clip_grad_norm();
    opt.step();
    const LinkBytes sent = counter.total() - before;

    const LinkBytes want = expected_bytes(c, rank);
    const ShardedModel::Counters k = engine.counters();
    const int64_t gathers = c.strategy == "no_shard" ? 0 : (c.strategy.find("grad_op") != std::string::npos ? 1 : 2);
    EXPECT_EQ(k.gathers + k.regathers, kUnits * kMicro * gathers) << c.name() << ": the gathers the formula counts";
    if (sent.intra != want.intra || sent.inter != want.inter)
      failures << "  " << c.name() << ": rank " << rank << " sent intra " << sent.intra << " inter " << sent.inter
               << " bytes; the formulas say intra " << want.intra << " inter " << want.inter << "\n";
  }
  EXPECT_EQ(failures.str(), "") << "byte counts off the formulas:\n" << failures.str();
  // Every rank's verdict: a rank whose counts are right must not pass while another's are wrong.
  EXPECT_FALSE(any_rank(mpi().world(), !failures.str().empty())) << "another rank's counts are off the formulas";
}

}  // namespace
}  // namespace wmtp::test
