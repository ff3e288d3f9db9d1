// MpiEnv: RAII owner of MPI_Init_thread/MPI_Finalize and the facts about this process's place in
// the job (rank, world, node-local rank via MPI_Comm_split_type, node count, host, Slurm
// job id and restart count). One per program, created first in main.
//
// Launchers: `srun --mpi=pmix` (Slurm starts every rank and wires MPI through PMIx) and `mpirun`
// (Open MPI's own launcher, also inside an sbatch allocation) both work; there is no rendezvous of
// our own. MPI's answers are authoritative — it gets them from the launcher — and LaunchEnv, read
// from the environment before MPI_Init, cross-checks them: a task that srun started without a PMI
// Open MPI understands comes up as a world of one, and we stop it with the fix instead of letting N
// copies of "rank 0" overwrite each other's files. Under mpirun the SLURM_PROCID/SLURM_LOCALID a
// rank inherits belong to Open MPI's daemon, not to the rank, so OMPI_COMM_WORLD_* win.
//
// Thread level: we request MPI_THREAD_MULTIPLE. Autograd may run backward functions (where the
// sharding engine issues its reduce-scatters) on worker threads — always for CUDA tensors — and
// prefetch waits may complete on another thread than the one that posted them. If the library
// provides less than MPI_THREAD_SERIALIZED we refuse to start; with SERIALIZED we warn, and the
// engine keeps every collective on the thread that runs backward (true for CPU autograd).
#pragma once
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "core/log.h"
#include "comm/mpi_util.h"  // the collectives on plain values (any_rank, ...) go with the environment

namespace wmtp {

enum class Launcher {
  none,    // started directly (a single process, or a Slurm batch script without srun)
  srun,    // a Slurm job step: SLURM_STEP_ID and SLURM_PROCID set by slurmstepd
  mpirun,  // Open MPI's launcher: OMPI_COMM_WORLD_* (wins over inherited SLURM_* variables)
  pmi,     // another PMI launcher (PMIx prterun, MPICH hydra): PMIX_RANK or PMI_RANK/PMI_SIZE
};
const char* launcher_name(Launcher l);

// What the launcher told this process through its environment. -1 where it does not say.
struct LaunchEnv {
  Launcher launcher = Launcher::none;
  int rank = -1, world_size = -1;
  int local_rank = -1, local_size = -1;  // among this node's tasks
  int node = -1, node_count = -1;        // srun: SLURM_NODEID (within the allocation), SLURM_STEP_NUM_NODES
  std::string mpi_type;                  // srun: SLURM_MPI_TYPE ("pmix", "pmi2"; "" = none)
  bool has_pmi = false;                  // a PMI endpoint was handed over (PMIx, PMI-2 or Open MPI's own)
  int batch_tasks = -1;                  // SLURM_NTASKS of the allocation when launcher == none
  std::string describe() const;          // "srun (pmix): task 3 of 4, node 1 of 2, local 1 of 2"
};

// Reads the launcher's variables through `getenv` (std::getenv in programs; a map in tests).
// Throws a usage error naming the variable when a value is not what the launcher writes.
using EnvLookup = std::function<const char*(const char*)>;
LaunchEnv detect_launch(const EnvLookup& getenv);

// SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE: "2(x3),1" -> {2, 2, 2, 1}, one count per node
// in node-index order. Throws a usage error naming `var` on a malformed value.
std::vector<int> parse_tasks_per_node(const std::string& value, const char* var = "SLURM_STEP_TASKS_PER_NODE");

// Before MPI_Init: a hint (empty if none) for a launch that the MPI library will likely reject,
// e.g. srun without --mpi=pmix under Open MPI, so the reason is on screen before MPI's own abort.
std::string launch_hint(const LaunchEnv& launch);
// After MPI_Init: MPI's world must be the one the launcher started; throws a usage error with the
// fix otherwise. Returns a warning (empty if none) for softer disagreements (rank, local rank, node
// count), which layouts we have not seen might produce.
std::string check_launch(const LaunchEnv& launch, int mpi_rank, int mpi_world_size, int mpi_local_rank,
                         int mpi_node_count);

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
  // Rank among the ranks of this node (MPI_COMM_TYPE_SHARED, ordered by world rank): the index of
  // the GPU to use when every rank of a node sees all its GPUs. Equals SLURM_LOCALID under srun and
  // OMPI_COMM_WORLD_LOCAL_RANK under mpirun; start-up warns if they ever differ.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  const LaunchEnv& launch() const { return launch_; }
  const std::string& host() const { return host_; }

  Logger logger() const { return Logger(rank_, host_); }
  // One line for start-up logs: world, nodes, launcher, job id, thread level.
  std::string describe() const;

  // Tear every rank down (a rank that merely exits leaves its peers hanging in a collective).
  [[noreturn]] void abort(int exit_code) const;

 private:
  bool owns_init_ = false;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  int rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1, node_count_ = 1;
  LaunchEnv launch_;
  int thread_level_ = MPI_THREAD_SINGLE;
  int restart_count_ = 0;
  std::string host_, slurm_job_id_;
};

}  // namespace wmtp
