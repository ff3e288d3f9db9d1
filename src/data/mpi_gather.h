// Small MPI helpers for the preprocessing program: variable-size gathers and scatters of plain
// vectors and strings, broadcasts and exclusive prefix sums. Collective over `comm`; every call
// is checked (WMTP_MPI_CHECK). Sizes beyond INT_MAX elements per rank are refused, not truncated.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace wmtp::mpi_util {

// Gathers each rank's bytes to `root` (others get an empty vector).
std::vector<std::string> gather_bytes(MPI_Comm comm, const std::string& local, int root);
// Root passes one string per rank; every rank receives its own.
std::string scatter_bytes(MPI_Comm comm, const std::vector<std::string>& per_rank, int root);
// Root's string to everyone.
std::string broadcast_bytes(MPI_Comm comm, const std::string& s, int root);

// Sum of `v` over ranks before this one (0 on rank 0), and the total.
int64_t exclusive_sum(MPI_Comm comm, int64_t v, int64_t* total = nullptr);
// Every rank's vector (all of the same length) concatenated in rank order.
std::vector<int64_t> all_gather(MPI_Comm comm, const std::vector<int64_t>& local);
int64_t all_sum(MPI_Comm comm, int64_t v);
int64_t all_max(MPI_Comm comm, int64_t v);

// Concatenation of every rank's vector at root, in rank order (trivially copyable T).
template <class T>
std::vector<T> gather_concat(MPI_Comm comm, const std::vector<T>& local, int root) {
  static_assert(std::is_trivially_copyable<T>::value, "plain data only");
  std::string bytes(reinterpret_cast<const char*>(local.data()), local.size() * sizeof(T));
  std::vector<std::string> parts = gather_bytes(comm, bytes, root);
  std::vector<T> out;
  for (const auto& p : parts) {
    const T* b = reinterpret_cast<const T*>(p.data());
    out.insert(out.end(), b, b + p.size() / sizeof(T));
  }
  return out;
}

}  // namespace wmtp::mpi_util
