// MpiEnv: RAII owner of MPI_Init_thread/MPI_Finalize and the facts about this process's place in
// the job (rank, world, node-local rank via MPI_Comm_split_type, node count, host, Slurm job id and
// restart count). One per program, created first in main.
//
// Thread level: we request MPI_THREAD_MULTIPLE. Autograd may run backward functions (where the
// sharding engine issues its reduce-scatters) on worker threads — always for CUDA tensors — and
// prefetch waits may complete on another thread than the one that posted them. If the library
// provides less than MPI_THREAD_SERIALIZED we refuse to start; with SERIALIZED we warn, and the
// engine keeps every collective on the thread that runs backward (true for CPU autograd).
#pragma once
#include <mpi.h>

#include <string>

#include "core/log.h"

namespace wmtp {

class MpiEnv {
 public:
  MpiEnv(int* argc, char*** argv);
  ~MpiEnv();
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  MPI_Comm world() const { return MPI_COMM_WORLD; }
  MPI_Comm node() const { return node_comm_; }  // ranks sharing this host
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  const std::string& host() const { return host_; }
  const std::string& slurm_job_id() const { return slurm_job_id_; }  // "" outside Slurm
  int restart_count() const { return restart_count_; }              // SLURM_RESTART_COUNT or 0
  int thread_level() const { return thread_level_; }

  Logger logger() const { return Logger(rank_, host_); }
  // One line for start-up logs: world, nodes, job id, thread level.
  std::string describe() const;

  // Tear every rank down (a rank that merely exits leaves its peers hanging in a collective).
  [[noreturn]] void abort(int exit_code) const;

 private:
  bool owns_init_ = false;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1, node_count_ = 1;
  int thread_level_ = MPI_THREAD_SINGLE;
  int restart_count_ = 0;
  std::string host_, slurm_job_id_;
};

// All ranks agree on a boolean (logical OR): "did any rank fail?". Collective over `comm`.
bool any_rank(MPI_Comm comm, bool flag);

}  // namespace wmtp
