// MPI helpers on plain values (see mpi_util.h).
#include "comm/mpi_util.h"

#include <algorithm>
#include <climits>

#include "core/check.h"
#include "comm/link_bytes.h"
#include "comm/mpi_watch.h"

namespace wmtp {

namespace {

bool single(MPI_Comm comm) { return comm == MPI_COMM_NULL; }

int checked_int(size_t n, const char* what) {
  if (n > static_cast<size_t>(INT_MAX)) throw_runtime(what, ": ", n, " bytes exceed one MPI message (INT_MAX)");
  return static_cast<int>(n);
}

std::vector<int> displacements(const std::vector<int>& counts, const char* what) {
  std::vector<int> d(counts.size(), 0);
  int64_t acc = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    d[i] = checked_int(static_cast<size_t>(acc), what);
    acc += counts[i];
  }
  checked_int(static_cast<size_t>(acc), what);
  return d;
}

// The bytes this rank sends, counted where `comm` counts (link_bytes.h).
template <class F>
void count(MPI_Comm comm, F f) {
  if (const auto links = links_of(comm)) f(*links);
}

}  // namespace

int comm_rank(MPI_Comm comm) {
  if (single(comm)) return 0;
  int r = 0;
  WMTP_MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

int comm_size(MPI_Comm comm) {
  if (single(comm)) return 1;
  int n = 1;
  WMTP_MPI_CHECK(MPI_Comm_size(comm, &n));
  return n;
}

void barrier(MPI_Comm comm) {
  if (single(comm)) return;
  WatchedMpiCall watch(comm, "barrier");
  WMTP_MPI_CHECK(MPI_Barrier(comm));
}

MPI_Comm split_comm(MPI_Comm parent, int color, int key) {
  MPI_Comm child = MPI_COMM_NULL;
  {
    WatchedMpiCall watch(parent, "split_comm");
    WMTP_MPI_CHECK(MPI_Comm_split(parent, color, key, &child));
  }
  inherit_watch(parent, child);
  inherit_links(parent, child);
  return child;
}

bool any_rank(MPI_Comm comm, bool flag) {
  if (single(comm)) return flag;
  WatchedMpiCall watch(comm, "any_rank");
  int in = flag ? 1 : 0, out = 0;
  WMTP_MPI_CHECK(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, comm));
  count(comm, [](const CommLinks& l) { l.all_reduce(1, sizeof(int)); });
  return out != 0;
}

bool same_on_all_ranks(MPI_Comm comm, uint64_t v) {
  if (single(comm)) return true;
  WatchedMpiCall watch(comm, "same_on_all_ranks");
  uint64_t lo = 0, hi = 0;
  WMTP_MPI_CHECK(MPI_Allreduce(&v, &lo, 1, MPI_UINT64_T, MPI_MIN, comm));
  WMTP_MPI_CHECK(MPI_Allreduce(&v, &hi, 1, MPI_UINT64_T, MPI_MAX, comm));
  count(comm, [](const CommLinks& l) { l.all_reduce(2, sizeof(uint64_t)); });  // two of one element
  return lo == hi;
}

double all_max(MPI_Comm comm, double v) {
  if (single(comm)) return v;
  WatchedMpiCall watch(comm, "all_max");
  double out = 0;
  WMTP_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm));
  count(comm, [](const CommLinks& l) { l.all_reduce(1, sizeof(double)); });
  return out;
}

int64_t all_sum(MPI_Comm comm, int64_t v) {
  if (single(comm)) return v;
  WatchedMpiCall watch(comm, "all_sum");
  int64_t out = 0;
  WMTP_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, comm));
  count(comm, [](const CommLinks& l) { l.all_reduce(1, sizeof(int64_t)); });
  return out;
}

void all_sum_u64(MPI_Comm comm, uint64_t* v, int n) {
  if (single(comm) || n == 0) return;
  WatchedMpiCall watch(comm, "all_sum_u64");
  WMTP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_UINT64_T, MPI_SUM, comm));
  count(comm, [n](const CommLinks& l) { l.all_reduce(n, sizeof(uint64_t)); });
}

int64_t exclusive_sum(MPI_Comm comm, int64_t v, int64_t* total) {
  if (single(comm)) {
    if (total) *total = v;
    return 0;
  }
  WatchedMpiCall watch(comm, "exclusive_sum");
  int64_t before = 0;
  WMTP_MPI_CHECK(MPI_Exscan(&v, &before, 1, MPI_INT64_T, MPI_SUM, comm));
  count(comm, [](const CommLinks& l) { l.exclusive_scan(sizeof(int64_t)); });
  if (comm_rank(comm) == 0) before = 0;  // MPI_Exscan leaves rank 0's result undefined
  if (total) *total = all_sum(comm, v);
  return before;
}

std::vector<int64_t> all_gather(MPI_Comm comm, const std::vector<int64_t>& local) {
  if (single(comm)) return local;
  WatchedMpiCall watch(comm, "all_gather");
  std::vector<int64_t> out(local.size() * static_cast<size_t>(comm_size(comm)));
  WMTP_MPI_CHECK(MPI_Allgather(local.data(), checked_int(local.size(), "all_gather"), MPI_INT64_T, out.data(),
                               static_cast<int>(local.size()), MPI_INT64_T, comm));
  count(comm, [&](const CommLinks& l) { l.all_gather(int64_t(local.size() * sizeof(int64_t))); });
  return out;
}

std::string bcast_string(MPI_Comm comm, const std::string& s, int root) {
  if (single(comm) || comm_size(comm) == 1) return s;
  WatchedMpiCall watch(comm, "bcast_string");
  uint64_t n = s.size();
  WMTP_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm));
  std::string out = comm_rank(comm) == root ? s : std::string(n, '\0');
  // Chunks under INT_MAX bytes: MPI counts are int.
  for (uint64_t off = 0; off < n; off += (1u << 30)) {
    int len = int(std::min<uint64_t>(n - off, 1u << 30));
    WMTP_MPI_CHECK(MPI_Bcast(out.data() + off, len, MPI_CHAR, root, comm));
  }
  count(comm, [&](const CommLinks& l) {
    l.broadcast(sizeof(n), root);
    l.broadcast(int64_t(n), root);
  });
  return out;
}

std::vector<std::string> gather_bytes(MPI_Comm comm, const std::string& local, int root) {
  if (single(comm)) return {local};
  WatchedMpiCall watch(comm, "gather_bytes");
  const int rank = comm_rank(comm), world = comm_size(comm);
  int n = checked_int(local.size(), "gather_bytes");
  std::vector<int> counts(world, 0);
  WMTP_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, root, comm));
  std::vector<int> displs;
  std::string all;
  if (rank == root) {
    displs = displacements(counts, "gather_bytes");
    all.resize(static_cast<size_t>(displs.back()) + counts.back());
  }
  WMTP_MPI_CHECK(
      MPI_Gatherv(local.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, root, comm));
  count(comm, [&](const CommLinks& l) { l.gather(int64_t(sizeof(int)) + n, root); });
  std::vector<std::string> out;
  if (rank == root)
    for (int r = 0; r < world; ++r) out.emplace_back(all.substr(displs[r], counts[r]));
  return out;
}

std::vector<std::string> all_gather_bytes(MPI_Comm comm, const std::string& local) {
  if (single(comm)) return {local};
  WatchedMpiCall watch(comm, "all_gather_bytes");
  const int world = comm_size(comm);
  int n = checked_int(local.size(), "all_gather_bytes");
  std::vector<int> counts(world, 0);
  WMTP_MPI_CHECK(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, comm));
  const std::vector<int> displs = displacements(counts, "all_gather_bytes");
  std::string all(static_cast<size_t>(displs.back()) + counts.back(), '\0');
  WMTP_MPI_CHECK(MPI_Allgatherv(local.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, comm));
  count(comm, [&](const CommLinks& l) {
    l.all_gather(sizeof(int));
    l.all_gatherv(std::vector<int64_t>(counts.begin(), counts.end()));
  });
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) out.emplace_back(all.substr(displs[r], counts[r]));
  return out;
}

std::string scatter_bytes(MPI_Comm comm, const std::vector<std::string>& per_rank, int root) {
  if (single(comm)) {
    WMTP_CHECK(per_rank.size() == 1, "scatter_bytes needs one string per rank");
    return per_rank[0];
  }
  WatchedMpiCall watch(comm, "scatter_bytes");
  const int rank = comm_rank(comm), world = comm_size(comm);
  std::vector<int> counts(world, 0), displs;
  std::string all;
  if (rank == root) {
    WMTP_CHECK(static_cast<int>(per_rank.size()) == world, "scatter_bytes needs one string per rank");
    for (int r = 0; r < world; ++r) counts[r] = checked_int(per_rank[r].size(), "scatter_bytes");
    displs = displacements(counts, "scatter_bytes");
    for (const auto& s : per_rank) all += s;
  }
  int n = 0;
  WMTP_MPI_CHECK(MPI_Scatter(counts.data(), 1, MPI_INT, &n, 1, MPI_INT, root, comm));
  std::string mine(static_cast<size_t>(n), '\0');
  WMTP_MPI_CHECK(
      MPI_Scatterv(all.data(), counts.data(), displs.data(), MPI_BYTE, mine.data(), n, MPI_BYTE, root, comm));
  count(comm, [&](const CommLinks& l) {
    std::vector<int64_t> bytes;
    for (int c : counts) bytes.push_back(int64_t(sizeof(int)) + c);
    l.scatter(bytes, root);
  });
  return mine;
}

}  // namespace wmtp
