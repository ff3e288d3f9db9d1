// Byte counting by link (comm/link_bytes.h) through the MPI communicators (mpirun -np 1..4): the
// world's hosts are given as two halves, A... then B..., so the ring crosses nodes twice. Every
// collective of MpiCommunicator (blocking and not; bf16 reductions counted as the fp32 they travel
// in), of the staged communicator, of the mpi_util.h helpers and of agree.h counts what the ring
// schedule sends, on the link to the rank's successor; sub-communicators from split_comm count with
// their own members (and keep the watchdog); a communicator made after LinkCounting is gone counts
// nothing.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "comm/agree.h"
#include "comm/link_bytes.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_util.h"
#include "comm/mpi_watch.h"
#include "comm/staged_communicator.h"
#include "test_util.h"

namespace wmtp {
namespace {

std::vector<std::string> halves(int n) {
  std::vector<std::string> h;
  for (int r = 0; r < n; ++r) h.push_back(r < (n + 1) / 2 ? "A" : "B");
  return h;
}

// What a ring over `n` ranks makes rank `rank` send: all-gather / reduce-scatter (n-1) blocks; an
// all-reduce, step by step over the chunks (see test_shard_groups.cpp).
int64_t ring_blocks(int n) { return n - 1; }
int64_t ring_all_reduce(int n, int rank, int64_t numel) {
  auto chunk = [&](int i) { return numel / n + (((i % n) + n) % n < numel % n ? 1 : 0); };
  int64_t s = 0;
  for (int k = 0; k + 1 < n; ++k) s += chunk(rank - k) + chunk(rank + 1 - k);
  return s;
}

struct LinkBytesTest : ::testing::Test {
  MPI_Comm dup = MPI_COMM_NULL;
  std::unique_ptr<LinkCounting> counting;
  int n = 1, rank = 0;
  bool next_inter = false;
  LinkBytes last;
  void SetUp() override {
    MPI_Comm_dup(test::mpi().world(), &dup);
    n = comm_size(dup), rank = comm_rank(dup);
    const auto h = halves(n);
    next_inter = h[size_t((rank + 1) % n)] != h[size_t(rank)];
    counting = std::make_unique<LinkCounting>(dup, h);
  }
  void TearDown() override {
    counting.reset();
    MPI_Comm_free(&dup);
  }
  // Bytes since the last call; all of them must be on the successor's link.
  int64_t sent(const std::string& what) {
    const LinkBytes t = counting->counter()->total() - last;
    last = counting->counter()->total();
    EXPECT_EQ(next_inter ? t.intra : t.inter, 0) << what << ": bytes on the other link";
    return next_inter ? t.inter : t.intra;
  }
};

TEST_F(LinkBytesTest, MpiCommunicatorCountsEveryCollective) {
  MpiCommunicator c(dup);
  for (bool async : {false, true}) {
    const std::string how = async ? " async" : "";
    at::Tensor in = at::ones({7}, at::kFloat), out = at::empty({7 * n}, at::kFloat);
    if (async) c.all_gather_async(in, out)->wait();
    else
      c.all_gather(in, out);
    EXPECT_EQ(sent("all_gather" + how), ring_blocks(n) * 7 * 4);
    for (auto dt : {at::kFloat, at::kBFloat16}) {
      at::Tensor big = at::ones({5 * n}, dt), block = at::empty({5}, dt);
      if (async) c.reduce_scatter_async(big, block, ReduceOp::Sum)->wait();
      else
        c.reduce_scatter(big, block, ReduceOp::Sum);
      EXPECT_EQ(sent("reduce_scatter" + how), ring_blocks(n) * 5 * 4) << "bf16 travels as fp32 over MPI";
      at::Tensor t = at::ones({13}, dt);
      if (async) c.all_reduce_async(t, ReduceOp::Sum)->wait();
      else
        c.all_reduce(t, ReduceOp::Sum);
      EXPECT_EQ(sent("all_reduce" + how), ring_all_reduce(n, rank, 13) * 4);
      at::Tensor g = at::ones({3}, dt), gathered = at::empty({3 * n}, dt);
      c.all_gather(g, gathered);  // nothing reduced: bf16 stays 2 bytes
      EXPECT_EQ(sent("all_gather " + std::string(c10::toString(dt))),
                ring_blocks(n) * 3 * int64_t(c10::elementSize(dt)));
    }
    at::Tensor b = at::ones({9}, at::kLong);
    if (async) c.broadcast_async(b, 0)->wait();
    else
      c.broadcast(b, 0);
    EXPECT_EQ(sent("broadcast" + how), n > 1 && (rank + 1) % n != 0 ? 9 * 8 : 0);
  }
  c.barrier();
  EXPECT_EQ(sent("barrier"), 0);
}

TEST_F(LinkBytesTest, StagedCommunicatorCountsWhatItsMpiSends) {
  StagedCommunicator c(dup, /*stage_host_tensors=*/true);
  at::Tensor in = at::ones({4}, at::kFloat), out = at::empty({4 * n}, at::kFloat);
  c.all_gather(in, out);
  EXPECT_EQ(sent("staged all_gather"), ring_blocks(n) * 4 * 4);
}

TEST_F(LinkBytesTest, MpiHelpersCount) {
  any_rank(dup, false);
  EXPECT_EQ(sent("any_rank"), ring_all_reduce(n, rank, 1) * 4);
  all_sum(dup, int64_t(3));
  EXPECT_EQ(sent("all_sum"), ring_all_reduce(n, rank, 1) * 8);
  bcast_string(dup, rank == 0 ? std::string(10, 'x') : "", 0);  // its length, then the bytes
  EXPECT_EQ(sent("bcast_string"), n > 1 && (rank + 1) % n != 0 ? 8 + 10 : 0);
  throw_if_any_failed(dup, std::nullopt);
  EXPECT_EQ(sent("agree_on_error"), ring_all_reduce(n, rank, 1) * 4);
  // Variable blocks: rank r's string is r + 1 bytes, after the all-gather of the lengths (ints).
  all_gather_bytes(dup, std::string(size_t(rank + 1), 'y'));
  int64_t total = 0;
  for (int r = 0; r < n; ++r) total += r + 1;
  EXPECT_EQ(sent("all_gather_bytes"), ring_blocks(n) * 4 + (n > 1 ? total - ((rank + 1) % n + 1) : 0));
}

TEST_F(LinkBytesTest, SplitCommunicatorsCountWithTheirOwnMembers) {
  MpiWatch watch(dup, 600);
  // Ranks of the same parity: 0 2 / 1 3. At np 4 (A A B B) their rings are all across nodes.
  MPI_Comm sub = split_comm(dup, rank % 2, rank);
  EXPECT_NE(watchdog_of(sub), nullptr) << "split_comm keeps the watchdog";
  const auto links = links_of(sub);
  ASSERT_NE(links, nullptr) << "split_comm keeps the counting";
  const int m = comm_size(sub), mine = comm_rank(sub);
  const auto h = halves(n);
  const int next_world = (mine + 1) % m * 2 + rank % 2;  // the successor's world rank
  EXPECT_EQ(links->link_to_next(), h[size_t(next_world)] == h[size_t(rank)] ? Link::Intra : Link::Inter);
  {
    MpiCommunicator c(sub);
    at::Tensor in = at::ones({6}, at::kFloat), out = at::empty({6 * m}, at::kFloat);
    const LinkBytes before = counting->counter()->total();
    c.all_gather(in, out);
    const LinkBytes d = counting->counter()->total() - before;
    EXPECT_EQ(links->link_to_next() == Link::Inter ? d.inter : d.intra, (m - 1) * 6 * 4);
    EXPECT_EQ(d.intra + d.inter, (m - 1) * 6 * 4);
  }
  MPI_Comm_free(&sub);
}

TEST_F(LinkBytesTest, NothingCountsAfterLinkCountingIsGone) {
  counting.reset();
  EXPECT_EQ(links_of(dup), nullptr);
  MpiCommunicator c(dup);  // a duplicate made now carries no counting
  at::Tensor t = at::ones({3}, at::kFloat);
  c.all_reduce(t, ReduceOp::Sum);
  EXPECT_EQ(t[0].item<float>(), float(n));
}

}  // namespace
}  // namespace wmtp
