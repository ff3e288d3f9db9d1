// Hybrid sharding's group layout (comm/shard_groups.h) from every rank's host, one process: the
// default group size, and the refusals naming the numbers (not a divisor; a group across nodes
// unevenly; nodes of different sizes). And the ring schedule's bytes per collective
// (comm/link_bytes.h's CommLinks), against a step-by-step ring written here.
#include <gtest/gtest.h>

#include <numeric>

#include "comm/link_bytes.h"
#include "comm/shard_groups.h"
#include "core/error.h"

namespace wmtp {
namespace {

std::vector<std::string> hosts(const std::vector<int>& ranks_per_host) {
  std::vector<std::string> h;
  for (size_t i = 0; i < ranks_per_host.size(); ++i)
    for (int r = 0; r < ranks_per_host[i]; ++r) h.push_back("node" + std::to_string(i + 1));
  return h;
}

std::string usage_error(int requested, const std::vector<std::string>& h) {
  try {
    plan_groups(requested, h);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage) << e.what();
    return e.what();
  }
  return "(accepted)";
}

TEST(ShardGroups, DefaultIsTheRanksPerNode) {
  const GroupLayout l = plan_groups(0, hosts({4, 4}));
  EXPECT_EQ(l.group_size, 4);
  EXPECT_EQ(l.replicas(), 2);
  EXPECT_EQ(l.group_of(5), 1);
  EXPECT_EQ(l.place_of(5), 1);
  EXPECT_EQ(plan_groups(0, hosts({1, 1, 1})).group_size, 1);  // a rank per node: replicas only
  EXPECT_EQ(plan_groups(0, hosts({6})).replicas(), 1);        // one node: full_shard's layout
}

TEST(ShardGroups, DivisorsInsideANodeAndWholeNodesAreAccepted) {
  EXPECT_EQ(plan_groups(2, hosts({4, 4})).replicas(), 4);  // two groups per node
  EXPECT_EQ(plan_groups(8, hosts({4, 4})).replicas(), 1);  // two whole nodes
  EXPECT_EQ(plan_groups(4, hosts({2, 2, 2, 2})).replicas(), 2);
  EXPECT_EQ(plan_groups(3, hosts({6})).replicas(), 2);
}

TEST(ShardGroups, RefusalsNameTheNumbers) {
  std::string e = usage_error(3, hosts({2, 2}));
  EXPECT_NE(e.find("shard_group_size = 3 does not divide the world size 4"), std::string::npos) << e;
  // 3 ranks per node, groups of 2: group 1 = ranks 2-3, one on each node.
  e = usage_error(2, hosts({3, 3}));
  EXPECT_NE(e.find("group 1 (ranks 2-3) would span nodes unevenly: node1 (1 of its 3 ranks) and node2 (1 of its 3 "
                   "ranks)"),
            std::string::npos)
      << e;
  // Groups of 6 over nodes of 4: 4 of one node and 2 of the next.
  e = usage_error(6, hosts({4, 4, 4}));
  EXPECT_NE(e.find("node1 (4 of its 4 ranks) and node2 (2 of its 4 ranks)"), std::string::npos) << e;
  // Ranks placed round-robin over the nodes (srun --distribution=cyclic): every pair spans two nodes.
  e = usage_error(2, {"a", "b", "a", "b"});
  EXPECT_NE(e.find("group 0 (ranks 0-1) would span nodes unevenly: a (1 of its 2 ranks) and b (1 of its 2 ranks)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--distribution=block"), std::string::npos) << e;
  e = usage_error(0, hosts({2, 1}));
  EXPECT_NE(e.find("the nodes run different numbers of ranks (node1: 2, node2: 1)"), std::string::npos) << e;
  e = usage_error(-1, hosts({2}));
  EXPECT_NE(e.find("shard_group_size must be >= 0"), std::string::npos) << e;
}

// The bytes rank `rank` sends to its successor in a ring of `n` ranks, step by step.
struct Ring {
  int n, rank;
  // All-gather: at step k a rank forwards the block it received at step k-1 (its own at step 0).
  int64_t all_gather(int64_t block) const { return (n - 1) * block; }
  // All-reduce: chunks of `numel` (the first numel % n one larger); reduce-scatter phase: chunk
  // rank - k at step k; all-gather phase: chunk rank + 1 - k.
  int64_t all_reduce(int64_t numel) const {
    auto chunk = [&](int i) { return numel / n + (((i % n) + n) % n < numel % n ? 1 : 0); };
    int64_t s = 0;
    for (int k = 0; k + 1 < n; ++k) s += chunk(rank - k) + chunk(rank + 1 - k);
    return s;
  }
};

TEST(LinkBytes, RingScheduleOfEachCollective) {
  for (int n : {1, 2, 3, 4, 5}) {
    // Ranks alternate between two nodes' halves: 0..n/2-1 on node 0, the rest on node 1.
    std::vector<int> node(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) node[static_cast<size_t>(r)] = r < n / 2 ? 0 : 1;
    for (int r = 0; r < n; ++r) {
      auto counter = std::make_shared<LinkCounter>();
      CommLinks l(counter, node, r);
      const Ring ring{n, r};
      const bool inter = node[static_cast<size_t>((r + 1) % n)] != node[static_cast<size_t>(r)];
      LinkBytes last;
      auto sent = [&] {  // since the last call, all of it on the link to the successor
        const LinkBytes t = counter->total() - last;
        last = counter->total();
        EXPECT_EQ(inter ? t.intra : t.inter, 0) << "n " << n << " rank " << r << ": bytes on the other link";
        return inter ? t.inter : t.intra;
      };
      const std::string at = "n " + std::to_string(n) + " rank " + std::to_string(r);
      l.all_gather(12);
      EXPECT_EQ(sent(), ring.all_gather(12)) << at;
      l.reduce_scatter(12);
      EXPECT_EQ(sent(), ring.all_gather(12)) << at;
      for (int64_t numel : {1, 7, 12, 1000}) {
        l.all_reduce(numel, 4);
        EXPECT_EQ(sent(), 4 * ring.all_reduce(numel)) << at << " all-reduce of " << numel;
      }
      for (int root = 0; root < n; ++root) {  // a chain from the root: the rank before it sends nothing
        l.broadcast(10, root);
        EXPECT_EQ(sent(), n > 1 && (r + 1) % n != root ? 10 : 0) << at << " root " << root;
      }
      std::vector<int64_t> blocks(static_cast<size_t>(n));
      std::iota(blocks.begin(), blocks.end(), 1);
      l.all_gatherv(blocks);  // every block but the successor's passes this rank
      EXPECT_EQ(sent(), std::accumulate(blocks.begin(), blocks.end(), int64_t(0)) -
                            (n > 1 ? blocks[size_t((r + 1) % n)] : blocks[0]))
          << at;
    }
  }
}

TEST(LinkBytes, RootedOperationsSendStraightToTheirDestination) {
  auto counter = std::make_shared<LinkCounter>();
  const std::vector<int> node = {0, 0, 1, 1};
  CommLinks rank1(counter, node, 1), rank2(counter, node, 2);
  rank1.gather(5, 0);  // to rank 0, the same node
  rank2.gather(7, 0);  // to rank 0, across
  EXPECT_EQ(counter->total().intra, 5);
  EXPECT_EQ(counter->total().inter, 7);
  const LinkBytes before = counter->total();
  rank1.scatter({1, 2, 3, 4}, 1);  // the root sends each rank its bytes: 1 to rank 0, 3 + 4 across
  rank2.scatter({1, 2, 3, 4}, 1);  // not the root: nothing
  EXPECT_EQ((counter->total() - before).intra, 1);
  EXPECT_EQ((counter->total() - before).inter, 7);
  EXPECT_EQ(node_indices({"x", "y", "x", "z"}), (std::vector<int>{0, 1, 0, 2}));
}

}  // namespace
}  // namespace wmtp
