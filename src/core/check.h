// Check macros for the C libraries we call: every MPI, HDF5 (and, with CUDA, CUDA/NCCL) call goes
// through one of these. A failure throws wmtp::Error (runtime) with file:line, the calling rank and
// host, the expression and the library's own error string. The throw helpers live in .cpp files so
// this header pulls in neither mpi.h nor hdf5.h.
#pragma once
#include "core/error.h"

namespace wmtp {
[[noreturn]] void throw_mpi_error(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_h5_error(const char* expr, const char* file, int line);
#ifdef WMTP_WITH_CUDA
[[noreturn]] void throw_cuda_error(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_nccl_error(int code, const char* expr, const char* file, int line);
#endif
// "rank 3 on node17" (or "rank ? on node17" before MPI_Init): for messages that cross ranks.
std::string rank_and_host();
}  // namespace wmtp

#define WMTP_MPI_CHECK(call)                                                         \
  do {                                                                               \
    int wmtp_rc_ = (call);                                                           \
    if (wmtp_rc_ != 0) ::wmtp::throw_mpi_error(wmtp_rc_, #call, __FILE__, __LINE__); \
  } while (0)

// HDF5 calls return a negative herr_t/hid_t on failure.
#define WMTP_H5_CHECK(call)                                              \
  ([&]() {                                                               \
    auto wmtp_rc_ = (call);                                              \
    if (wmtp_rc_ < 0) ::wmtp::throw_h5_error(#call, __FILE__, __LINE__); \
    return wmtp_rc_;                                                     \
  }())

#ifdef WMTP_WITH_CUDA
#define WMTP_CUDA_CHECK(call)                                                         \
  do {                                                                                \
    int wmtp_rc_ = static_cast<int>(call);                                            \
    if (wmtp_rc_ != 0) ::wmtp::throw_cuda_error(wmtp_rc_, #call, __FILE__, __LINE__); \
  } while (0)
#define WMTP_NCCL_CHECK(call)                                                         \
  do {                                                                                \
    int wmtp_rc_ = static_cast<int>(call);                                            \
    if (wmtp_rc_ != 0) ::wmtp::throw_nccl_error(wmtp_rc_, #call, __FILE__, __LINE__); \
  } while (0)
#endif
