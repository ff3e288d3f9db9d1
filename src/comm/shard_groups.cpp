// Shard groups: the group layout from the ranks' hosts, and the group and replica communicators.
#include "comm/shard_groups.h"

#include <map>
#include <sstream>

#include "core/check.h"
#include "core/error.h"
#include "comm/mpi_util.h"

namespace wmtp {

namespace {

// "host1 (1 of its 3 ranks) and host2 (1 of its 3 ranks)"
std::string describe_span(const std::map<std::string, int>& in_group, const std::map<std::string, int>& on_host) {
  std::ostringstream os;
  size_t i = 0;
  for (const auto& [host, n] : in_group) {
    os << (i == 0                     ? ""
           : i + 1 == in_group.size() ? " and "
                                      : ", ")
       << host << " (" << n << " of its " << on_host.at(host) << " ranks)";
    ++i;
  }
  return os.str();
}

}  // namespace

GroupLayout plan_groups(int requested, const std::vector<std::string>& rank_hosts) {
  const int n = int(rank_hosts.size());
  WMTP_CHECK(n >= 1, "plan_groups: no ranks");
  if (requested < 0) throw_usage("[sharding] shard_group_size must be >= 0 (0 = the ranks per node), got ", requested);
  std::map<std::string, int> on_host;
  for (const std::string& h : rank_hosts) ++on_host[h];
  int s = requested;
  if (s == 0) {
    s = on_host.begin()->second;
    for (const auto& [host, count] : on_host)
      if (count != s)
        throw_usage(
            "[sharding] shard_group_size = 0 takes the ranks per node, but the nodes run different numbers of "
            "ranks (",
            on_host.begin()->first, ": ", s, ", ", host, ": ", count,
            "); start the same number of ranks on every node or set shard_group_size");
  }
  if (n % s != 0)
    throw_usage("[sharding] shard_group_size = ", s, " does not divide the world size ", n, " (", n,
                " ranks cannot form ", "groups of ", s, "); use a divisor of ", n);
  for (int g = 0; g < n / s; ++g) {
    std::map<std::string, int> in_group;
    for (int r = g * s; r < (g + 1) * s; ++r) ++in_group[rank_hosts[size_t(r)]];
    if (in_group.size() == 1) continue;  // inside one node
    bool whole = true;
    for (const auto& [host, count] : in_group)
      whole = whole && count == on_host.at(host) && count == in_group.begin()->second;
    if (!whole)
      throw_usage("[sharding] shard_group_size = ", s, ": group ", g, " (ranks ", g * s, "-", (g + 1) * s - 1,
                  ") would span nodes unevenly: ", describe_span(in_group, on_host),
                  ". A group must lie inside one node, or be whole nodes with the same number of ranks each; place "
                  "ranks by node (srun --distribution=block) and use a divisor or a multiple of the ranks per node");
  }
  return GroupLayout{n, s};
}

ShardGroups make_shard_groups(MPI_Comm world, const GroupLayout& layout, const CommFactory& make) {
  const int rank = comm_rank(world);
  WMTP_CHECK(comm_size(world) == layout.world_size, "make_shard_groups: a layout of ", layout.world_size,
             " ranks for a world of ", comm_size(world));
  ShardGroups g;
  g.layout = layout;
  // Ordered by world rank within each: the group's rank is the place, the replica's the group index.
  for (bool group : {true, false}) {
    MPI_Comm sub = split_comm(world, group ? layout.group_of(rank) : layout.place_of(rank), rank);
    try {
      (group ? g.group : g.replica) = make(sub);
    } catch (...) {
      MPI_Comm_free(&sub);
      throw;
    }
    MPI_Comm_free(&sub);
  }
  WMTP_CHECK(g.group->rank() == layout.place_of(rank) && g.replica->rank() == layout.group_of(rank),
             "make_shard_groups: rank ", rank, " came out as ", g.group->rank(), " in its group and ",
             g.replica->rank(), " among its replicas");
  return g;
}

}  // namespace wmtp
