// Variable-size MPI gathers/scatters/broadcasts on byte strings (MPI_Gatherv / MPI_Scatterv).
#include "data/mpi_gather.h"

#include <climits>

#include "core/check.h"

namespace wmtp::mpi_util {

namespace {
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
}  // namespace

std::vector<std::string> gather_bytes(MPI_Comm comm, const std::string& local, int root) {
  int rank, world;
  WMTP_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  WMTP_MPI_CHECK(MPI_Comm_size(comm, &world));
  int n = checked_int(local.size(), "gather_bytes");
  std::vector<int> counts(world, 0);
  WMTP_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, root, comm));
  std::vector<int> displs;
  std::string all;
  if (rank == root) {
    displs = displacements(counts, "gather_bytes");
    all.resize(static_cast<size_t>(displs.back()) + counts.back());
  }
  WMTP_MPI_CHECK(MPI_Gatherv(local.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, root, comm));
  std::vector<std::string> out;
  if (rank == root)
    for (int r = 0; r < world; ++r) out.emplace_back(all.substr(displs[r], counts[r]));
  return out;
}

std::string scatter_bytes(MPI_Comm comm, const std::vector<std::string>& per_rank, int root) {
  int rank, world;
  WMTP_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  WMTP_MPI_CHECK(MPI_Comm_size(comm, &world));
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
  WMTP_MPI_CHECK(MPI_Scatterv(all.data(), counts.data(), displs.data(), MPI_BYTE, mine.data(), n, MPI_BYTE, root, comm));
  return mine;
}

std::string broadcast_bytes(MPI_Comm comm, const std::string& s, int root) {
  int rank;
  WMTP_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int64_t n = static_cast<int64_t>(s.size());
  WMTP_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, root, comm));
  std::string out = rank == root ? s : std::string(static_cast<size_t>(n), '\0');
  WMTP_MPI_CHECK(MPI_Bcast(out.data(), checked_int(static_cast<size_t>(n), "broadcast_bytes"), MPI_BYTE, root, comm));
  return out;
}

int64_t exclusive_sum(MPI_Comm comm, int64_t v, int64_t* total) {
  int rank;
  WMTP_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int64_t before = 0;
  WMTP_MPI_CHECK(MPI_Exscan(&v, &before, 1, MPI_INT64_T, MPI_SUM, comm));
  if (rank == 0) before = 0;  // MPI_Exscan leaves rank 0's result undefined
  if (total) *total = all_sum(comm, v);
  return before;
}

std::vector<int64_t> all_gather(MPI_Comm comm, const std::vector<int64_t>& local) {
  int world;
  WMTP_MPI_CHECK(MPI_Comm_size(comm, &world));
  std::vector<int64_t> out(local.size() * static_cast<size_t>(world));
  WMTP_MPI_CHECK(MPI_Allgather(local.data(), checked_int(local.size(), "all_gather"), MPI_INT64_T, out.data(),
                               static_cast<int>(local.size()), MPI_INT64_T, comm));
  return out;
}

int64_t all_sum(MPI_Comm comm, int64_t v) {
  int64_t out = 0;
  WMTP_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_SUM, comm));
  return out;
}

int64_t all_max(MPI_Comm comm, int64_t v) {
  int64_t out = 0;
  WMTP_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_MAX, comm));
  return out;
}

}  // namespace wmtp::mpi_util
