// MPI helpers for the checkpoint code (see collective_util.h).
#include "ckpt/collective_util.h"

#include <climits>
#include <vector>

#include "core/check.h"

namespace wmtp {

int comm_rank(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return 0;
  int r = 0;
  WMTP_MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

int comm_size(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return 1;
  int n = 1;
  WMTP_MPI_CHECK(MPI_Comm_size(comm, &n));
  return n;
}

namespace {
std::string bcast_from(MPI_Comm comm, const std::string& s, int root) {
  uint64_t n = s.size();
  WMTP_MPI_CHECK(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm));
  std::string out = comm_rank(comm) == root ? s : std::string(n, '\0');
  // Chunks under INT_MAX bytes: MPI counts are int.
  for (uint64_t off = 0; off < n; off += (1u << 30)) {
    int len = int(std::min<uint64_t>(n - off, 1u << 30));
    WMTP_MPI_CHECK(MPI_Bcast(out.data() + off, len, MPI_CHAR, root, comm));
  }
  return out;
}
}  // namespace

std::string bcast_string(MPI_Comm comm, const std::string& s) {
  if (comm == MPI_COMM_NULL || comm_size(comm) == 1) return s;
  return bcast_from(comm, s, 0);
}

std::string agree_error(MPI_Comm comm, const std::string& local) {
  if (comm == MPI_COMM_NULL || comm_size(comm) == 1) return local;
  int mine = local.empty() ? INT_MAX : comm_rank(comm), first = INT_MAX;
  WMTP_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == INT_MAX) return "";
  return bcast_from(comm, local, first);
}

bool same_on_all_ranks(MPI_Comm comm, uint64_t v) {
  if (comm == MPI_COMM_NULL || comm_size(comm) == 1) return true;
  uint64_t lo = 0, hi = 0;
  WMTP_MPI_CHECK(MPI_Allreduce(&v, &lo, 1, MPI_UINT64_T, MPI_MIN, comm));
  WMTP_MPI_CHECK(MPI_Allreduce(&v, &hi, 1, MPI_UINT64_T, MPI_MAX, comm));
  return lo == hi;
}

void all_reduce_sum_u64(MPI_Comm comm, uint64_t* v, int n) {
  if (comm == MPI_COMM_NULL || comm_size(comm) == 1 || n == 0) return;
  WMTP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_UINT64_T, MPI_SUM, comm));
}

void barrier(MPI_Comm comm) {
  if (comm != MPI_COMM_NULL) WMTP_MPI_CHECK(MPI_Barrier(comm));
}

}  // namespace wmtp
