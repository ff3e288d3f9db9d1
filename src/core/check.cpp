// Throw helpers behind the MPI and HDF5 check macros: format the library's error string with
// file:line, rank and host.
#include "core/check.h"

#include "core/log.h"

#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <string>

namespace wmtp {

std::string rank_and_host() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  std::string rank = "?";
  if (initialized && !finalized) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    rank = std::to_string(r);
  }
  return "rank " + rank + " on " + host_name();
}

void throw_mpi_error(int code, const char* expr, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof(msg), "MPI error %d", code);
  throw_runtime(source_location(file, line), ": ", expr, " failed (", rank_and_host(), "): ", msg);
}

namespace {
herr_t collect_h5_error(unsigned n, const H5E_error2_t* err, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (!out->empty()) *out += "; ";
  *out += err->desc ? err->desc : "?";
  if (err->func_name) *out += std::string(" (in ") + err->func_name + ")";
  return 0;
}
}  // namespace

void throw_h5_error(const char* expr, const char* file, int line) {
  std::string stack;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_h5_error, &stack);
  H5Eclear2(H5E_DEFAULT);
  if (stack.empty()) stack = "no HDF5 error message";
  throw_runtime(source_location(file, line), ": ", expr, " failed (", rank_and_host(), "): ", stack);
}

}  // namespace wmtp
