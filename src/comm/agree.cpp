// Error agreement across ranks (see agree.h).
#include "comm/agree.h"

#include <climits>
#include <string>

#include "core/check.h"
#include "comm/link_bytes.h"
#include "comm/mpi_watch.h"

namespace wmtp {

std::optional<Error> agree_on_error(MPI_Comm comm, const std::optional<Error>& mine) {
  if (comm == MPI_COMM_NULL || comm_size(comm) == 1) {
    if (!mine) return std::nullopt;
    return Error(mine->kind(), mine->what(), Reach::Agreed);
  }
  // Lowest failing rank: one all-reduce, the common (no failure) case costs nothing more.
  int me = mine ? comm_rank(comm) : INT_MAX, first = INT_MAX;
  {
    WatchedMpiCall watch(comm, "agree_on_error");
    WMTP_MPI_CHECK(MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, comm));
  }
  if (const auto links = links_of(comm)) links->all_reduce(1, sizeof(int));
  if (first == INT_MAX) return std::nullopt;
  // Its kind travels as the first byte, then its message.
  std::string packed;
  if (comm_rank(comm) == first) packed = std::string(1, char(int(mine->kind()))) + mine->what();
  packed = bcast_string(comm, packed, first);
  const ErrorKind kind = ErrorKind(int(packed.at(0)));
  return Error(kind, packed.substr(1), Reach::Agreed);
}

void throw_if_any_failed(MPI_Comm comm, const std::optional<Error>& mine) {
  if (std::optional<Error> e = agree_on_error(comm, mine)) throw *e;
}

Error current_exception_as_error() {
  try {
    throw;
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    std::string what = e.what();
    return Error(ErrorKind::Runtime, what.empty() ? "unknown error" : what);
  } catch (...) {
    return Error(ErrorKind::Runtime, "unknown non-standard exception");
  }
}

}  // namespace wmtp
