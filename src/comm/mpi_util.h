// The MPI glue every area uses on plain values (the sharding engine's tensor collectives are in
// communicator.h): ranks and sizes, barriers, logical OR, sums and maxima, broadcasts, variable-size
// gathers and scatters of byte strings, prefix sums. Every call is checked (WMTP_MPI_CHECK) and
// collective over `comm`. MPI_COMM_NULL means "one process": each helper is then the identity
// (comm_rank 0, comm_size 1), so one-process tools can call the same code without MPI.
// Messages beyond INT_MAX bytes are split (broadcasts) or refused (gathers), never truncated.
// Error agreement ("did any rank fail, and with what?") is in agree.h, on top of these.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace wmtp {

int comm_rank(MPI_Comm comm);  // 0 for MPI_COMM_NULL
int comm_size(MPI_Comm comm);  // 1 for MPI_COMM_NULL
void barrier(MPI_Comm comm);
// MPI_Comm_split under `parent`'s collective watchdog; the result keeps the watchdog and the byte
// counting (link_bytes.h) of `parent`. The caller frees it (MPI_Comm_free).
MPI_Comm split_comm(MPI_Comm parent, int color, int key);

// All ranks agree on a boolean (logical OR): "did any rank ...?".
bool any_rank(MPI_Comm comm, bool flag);
// True when `v` is the same on every rank.
bool same_on_all_ranks(MPI_Comm comm, uint64_t v);

int64_t all_sum(MPI_Comm comm, int64_t v);
// The largest of every rank's `v` (e.g. the slowest rank's time).
double all_max(MPI_Comm comm, double v);
// Sums `n` values in place across ranks (wrapping modulo 2^64: checksums).
void all_sum_u64(MPI_Comm comm, uint64_t* v, int n);
// Sum of `v` over ranks before this one (0 on rank 0), and the total.
int64_t exclusive_sum(MPI_Comm comm, int64_t v, int64_t* total = nullptr);
// Every rank's vector (all of the same length) concatenated in rank order.
std::vector<int64_t> all_gather(MPI_Comm comm, const std::vector<int64_t>& local);

// `root`'s string on every rank (any length).
std::string bcast_string(MPI_Comm comm, const std::string& s, int root = 0);
// Each rank's bytes at `root`, in rank order (other ranks get an empty vector).
std::vector<std::string> gather_bytes(MPI_Comm comm, const std::string& local, int root);
// Every rank's bytes on every rank, in rank order.
std::vector<std::string> all_gather_bytes(MPI_Comm comm, const std::string& local);
// Root passes one string per rank; every rank receives its own.
std::string scatter_bytes(MPI_Comm comm, const std::vector<std::string>& per_rank, int root);

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

}  // namespace wmtp
