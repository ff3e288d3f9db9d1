// MpiEnv: MPI start-up/shut-down and topology discovery.
#include "dist/mpi_env.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "core/check.h"

namespace wmtp {

MpiEnv::MpiEnv(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    WMTP_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
    owns_init_ = true;
  } else {
    MPI_Query_thread(&thread_level_);
  }
  // Errors come back as return codes, which the check macros turn into exceptions with context.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  WMTP_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  WMTP_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  if (thread_level_ < MPI_THREAD_SERIALIZED)
    throw_runtime("MPI provides thread level ", thread_level_,
                  " but wmtp needs at least MPI_THREAD_SERIALIZED (collectives are issued from autograd)");

  WMTP_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm_));
  WMTP_MPI_CHECK(MPI_Comm_rank(node_comm_, &local_rank_));
  WMTP_MPI_CHECK(MPI_Comm_size(node_comm_, &local_size_));
  int leader = local_rank_ == 0 ? 1 : 0;
  WMTP_MPI_CHECK(MPI_Allreduce(&leader, &node_count_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  host_ = host;
  if (const char* j = std::getenv("SLURM_JOB_ID")) slurm_job_id_ = j;
  if (const char* r = std::getenv("SLURM_RESTART_COUNT")) restart_count_ = std::atoi(r);
  if (thread_level_ < MPI_THREAD_MULTIPLE && rank_ == 0)
    logger().warn("MPI provides MPI_THREAD_SERIALIZED, not MULTIPLE: collectives stay on the autograd thread");
}

MpiEnv::~MpiEnv() {
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_init_ && !finalized) MPI_Finalize();
}

std::string MpiEnv::describe() const {
  std::ostringstream os;
  os << "world " << world_size_ << " rank(s) on " << node_count_ << " node(s), " << local_size_
     << " on this node (" << host_ << ")";
  if (!slurm_job_id_.empty()) os << ", Slurm job " << slurm_job_id_ << " restart " << restart_count_;
  os << ", MPI thread level "
     << (thread_level_ == MPI_THREAD_MULTIPLE ? "MULTIPLE" : thread_level_ == MPI_THREAD_SERIALIZED ? "SERIALIZED" : "low");
  return os.str();
}

void MpiEnv::abort(int exit_code) const {
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

bool any_rank(MPI_Comm comm, bool flag) {
  int in = flag ? 1 : 0, out = 0;
  WMTP_MPI_CHECK(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, comm));
  return out != 0;
}

}  // namespace wmtp
