// Small MPI helpers the checkpoint code needs so that every rank makes the same HDF5 calls and
// fails the same way: broadcast a string, agree on an error message, check a value is equal on all
// ranks. MPI_COMM_NULL means "one process": each helper is then the identity.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

namespace wmtp {

int comm_rank(MPI_Comm comm);  // 0 for MPI_COMM_NULL
int comm_size(MPI_Comm comm);  // 1 for MPI_COMM_NULL

// Rank 0's `s` on every rank.
std::string bcast_string(MPI_Comm comm, const std::string& s);

// "" when no rank reported an error (local == ""), else the message of the lowest failing rank,
// returned on every rank (so that an agreed error can be thrown and printed once by rank 0).
std::string agree_error(MPI_Comm comm, const std::string& local);

// True when `v` is the same on every rank.
bool same_on_all_ranks(MPI_Comm comm, uint64_t v);

// Sums in place across ranks (wrapping modulo 2^64).
void all_reduce_sum_u64(MPI_Comm comm, uint64_t* v, int n);

void barrier(MPI_Comm comm);

}  // namespace wmtp
