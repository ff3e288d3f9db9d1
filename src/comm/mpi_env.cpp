// MpiEnv: MPI start-up/shut-down, topology discovery, and the launcher cross-check.
#include "comm/mpi_env.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/check.h"
#include "core/log.h"

namespace wmtp {

const char* launcher_name(Launcher l) {
  switch (l) {
    case Launcher::none: return "none";
    case Launcher::srun: return "srun";
    case Launcher::mpirun: return "mpirun";
    case Launcher::pmi: return "pmi";
  }
  return "?";
}

namespace {

// A non-negative integer variable, or -1 when unset. Anything else is a launcher we do not
// understand: say which variable, rather than guess a rank.
int env_int(const EnvLookup& getenv, const char* var) {
  const char* v = getenv(var);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 30)
    throw_usage("environment variable ", var, "='", v, "' is not a non-negative integer (set by the launcher?)");
  return static_cast<int>(x);
}

bool env_set(const EnvLookup& getenv, const char* var) {
  const char* v = getenv(var);
  return v != nullptr && *v != '\0';
}

}  // namespace

std::vector<int> parse_tasks_per_node(const std::string& value, const char* var) {
  // Slurm's compressed list: comma-separated "count" or "count(xrepeat)".
  auto bad = [&]() {
    throw_usage("environment variable ", var, "='", value, "' is not a Slurm task list such as \"2(x3),1\"");
  };
  std::vector<int> counts;
  size_t i = 0;
  auto number = [&]() {
    size_t start = i;
    long x = 0;
    while (i < value.size() && value[i] >= '0' && value[i] <= '9' && x <= 1 << 24) x = x * 10 + (value[i++] - '0');
    if (i == start || x > 1 << 24) bad();
    return static_cast<int>(x);
  };
  if (value.empty()) bad();
  while (i < value.size()) {
    int count = number();
    int repeat = 1;
    if (i < value.size() && value[i] == '(') {
      if (value.compare(i, 2, "(x") != 0) bad();
      i += 2;
      repeat = number();
      if (i >= value.size() || value[i] != ')' || repeat == 0) bad();
      ++i;
    }
    if (counts.size() + repeat > (1u << 20)) bad();
    counts.insert(counts.end(), repeat, count);
    if (i < value.size()) {
      if (value[i] != ',' || i + 1 == value.size()) bad();
      ++i;
    }
  }
  return counts;
}

LaunchEnv detect_launch(const EnvLookup& getenv) {
  LaunchEnv e;
  e.has_pmi = env_set(getenv, "PMIX_RANK") || env_set(getenv, "PMI_FD") || env_set(getenv, "PMI_RANK") ||
              env_set(getenv, "OMPI_COMM_WORLD_SIZE");
  if (env_set(getenv, "OMPI_COMM_WORLD_SIZE")) {
    // mpirun: first, because its ranks inside an allocation inherit the daemon's SLURM_* values.
    e.launcher = Launcher::mpirun;
    e.rank = env_int(getenv, "OMPI_COMM_WORLD_RANK");
    e.world_size = env_int(getenv, "OMPI_COMM_WORLD_SIZE");
    e.local_rank = env_int(getenv, "OMPI_COMM_WORLD_LOCAL_RANK");
    e.local_size = env_int(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (env_set(getenv, "SLURM_STEP_ID") && env_set(getenv, "SLURM_PROCID")) {
    // A job step (srun). The batch script itself has SLURM_PROCID=0 but no SLURM_STEP_ID.
    e.launcher = Launcher::srun;
    e.rank = env_int(getenv, "SLURM_PROCID");
    e.world_size = env_int(getenv, "SLURM_STEP_NUM_TASKS");
    if (e.world_size < 0) e.world_size = env_int(getenv, "SLURM_NTASKS");
    e.local_rank = env_int(getenv, "SLURM_LOCALID");
    e.node = env_int(getenv, "SLURM_NODEID");
    e.node_count = env_int(getenv, "SLURM_STEP_NUM_NODES");
    if (const char* mt = getenv("SLURM_MPI_TYPE")) e.mpi_type = mt;
    if (e.mpi_type == "none") e.mpi_type.clear();
    // Tasks on this node: the step's per-node list, indexed by the node's place in the step. The
    // step may run on part of the allocation, where SLURM_NODEID counts from the allocation's first
    // node; the list is the step's own, so look the count up only when it is unambiguous.
    if (const char* tpn = getenv("SLURM_STEP_TASKS_PER_NODE"); tpn != nullptr && *tpn != '\0') {
      std::vector<int> counts = parse_tasks_per_node(tpn, "SLURM_STEP_TASKS_PER_NODE");
      if (e.node_count >= 0 && static_cast<int>(counts.size()) != e.node_count)
        throw_usage("SLURM_STEP_TASKS_PER_NODE='", tpn, "' lists ", counts.size(),
                    " node(s) but SLURM_STEP_NUM_NODES=", e.node_count);
      int sum = 0;
      for (int c : counts) sum += c;
      if (e.world_size >= 0 && sum != e.world_size)
        throw_usage("SLURM_STEP_TASKS_PER_NODE='", tpn, "' adds up to ", sum,
                    " task(s) but SLURM_STEP_NUM_TASKS=", e.world_size);
      if (e.node >= 0 && e.node < static_cast<int>(counts.size())) e.local_size = counts[e.node];
      if (counts.size() == 1) e.local_size = counts[0];
    }
    if (e.world_size >= 0 && e.rank >= e.world_size)
      throw_usage("SLURM_PROCID=", e.rank, " is not below SLURM_STEP_NUM_TASKS=", e.world_size);
    if (e.local_size >= 0 && e.local_rank >= e.local_size)
      throw_usage("SLURM_LOCALID=", e.local_rank, " is not below the ", e.local_size, " task(s) on this node");
  } else if (env_set(getenv, "PMIX_RANK") || env_set(getenv, "PMI_RANK")) {
    e.launcher = Launcher::pmi;
    e.rank = env_int(getenv, env_set(getenv, "PMIX_RANK") ? "PMIX_RANK" : "PMI_RANK");
    e.world_size = env_int(getenv, "PMI_SIZE");
  } else {
    e.launcher = Launcher::none;
    // Inside an sbatch script: how many tasks the allocation was meant to run.
    if (env_set(getenv, "SLURM_JOB_ID")) e.batch_tasks = env_int(getenv, "SLURM_NTASKS");
  }
  return e;
}

std::string LaunchEnv::describe() const {
  std::ostringstream os;
  os << launcher_name(launcher);
  if (launcher == Launcher::srun) os << " (" << (mpi_type.empty() ? "no --mpi" : mpi_type) << ")";
  if (launcher == Launcher::none) return os.str();
  if (rank >= 0) os << ": task " << rank;
  if (world_size >= 0) os << " of " << world_size;
  if (node >= 0) os << ", node " << node;
  if (node_count >= 0) os << " of " << node_count;
  if (local_rank >= 0) os << ", local " << local_rank;
  if (local_size >= 0) os << " of " << local_size;
  return os.str();
}

std::string launch_hint(const LaunchEnv& e) {
  if (e.launcher != Launcher::srun) return "";
#ifdef OPEN_MPI
  // Debian's (and most distributions') Open MPI speaks PMIx only: --mpi=pmi2 and --mpi=none abort
  // inside MPI_Init with a message that does not name the srun option.
  if (e.mpi_type.rfind("pmix", 0) != 0)
    return "srun started this task with --mpi=" + (e.mpi_type.empty() ? std::string("none") : e.mpi_type) +
           "; this program's Open MPI needs `srun --mpi=pmix` (or MpiDefault=pmix in slurm.conf, or "
           "export SLURM_MPI_TYPE=pmix) unless it was built --with-pmi against Slurm's libpmi2";
#else
  if (!e.has_pmi && e.world_size > 1)
    return "srun started this task without a PMI (--mpi=none); use `srun --mpi=pmix` (or --mpi=pmi2 if "
           "this MPI library was built against Slurm's PMI-2)";
#endif
  return "";
}

std::string check_launch(const LaunchEnv& e, int mpi_rank, int mpi_world_size, int mpi_local_rank, int mpi_node_count) {
  if (e.launcher == Launcher::none) {
    if (e.batch_tasks > 1 && mpi_world_size == 1)
      return "started without srun or mpirun inside a Slurm job of " + std::to_string(e.batch_tasks) +
             " tasks: running as 1 rank (launch with `srun --mpi=pmix`)";
    return "";
  }
  if (e.world_size >= 0 && e.world_size != mpi_world_size) {
    std::string fix = e.launcher == Launcher::srun
                          ? "srun could not hand this task to MPI (--mpi=" +
                                (e.mpi_type.empty() ? "none" : e.mpi_type) +
                                "), so each task started alone; launch with `srun --mpi=pmix`, or set MpiDefault=pmix "
                                "in slurm.conf or SLURM_MPI_TYPE=pmix"
                          : "the MPI library is not the one this launcher belongs to (mixing Open MPI and MPICH?)";
    throw_usage(launcher_name(e.launcher), " started ", e.world_size, " task(s) but MPI sees a world of ",
                mpi_world_size, ": ", fix);
  }
  std::ostringstream w;
  if (e.rank >= 0 && e.rank != mpi_rank) w << "; launcher rank " << e.rank << " but MPI rank " << mpi_rank;
  if (e.local_rank >= 0 && e.local_rank != mpi_local_rank)
    w << "; launcher local rank " << e.local_rank << " but MPI node-local rank " << mpi_local_rank
      << " (GPU choice follows MPI)";
  if (e.node_count >= 0 && e.node_count != mpi_node_count)
    w << "; launcher says " << e.node_count << " node(s) but MPI groups the ranks into " << mpi_node_count;
  std::string s = w.str();
  return s.empty() ? s : "launcher and MPI disagree: " + s.substr(2);
}

MpiEnv::MpiEnv(int* argc, char*** argv) {
  launch_ = detect_launch([](const char* v) { return static_cast<const char*>(std::getenv(v)); });
  // Before MPI_Init: an MPI library that rejects the launch aborts there without naming srun's options.
  if (std::string hint = launch_hint(launch_); !hint.empty() && launch_.rank <= 0) {
    fprintf(stderr, "wmtp: note: %s\n", hint.c_str());
    fflush(stderr);
  }
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

  host_ = host_name();
  if (const char* j = std::getenv("SLURM_JOB_ID")) slurm_job_id_ = j;
  if (const char* r = std::getenv("SLURM_RESTART_COUNT")) restart_count_ = std::atoi(r);
  std::string warning;
  try {
    warning = check_launch(launch_, rank_, world_size_, local_rank_, node_count_);
  } catch (const Error&) {
    // Every task of the launch sees the same mismatch: shut MPI down cleanly on all of them.
    MPI_Comm_free(&node_comm_);
    if (owns_init_) MPI_Finalize();
    throw;
  }
  if (!warning.empty()) logger().warn("%s", warning.c_str());
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
  os << "world " << world_size_ << " rank(s) on " << node_count_ << " node(s), " << local_size_ << " on this node ("
     << host_ << "), launcher " << launch_.describe();
  if (!slurm_job_id_.empty()) os << ", Slurm job " << slurm_job_id_ << " restart " << restart_count_;
  os << ", MPI thread level "
     << (thread_level_ == MPI_THREAD_MULTIPLE     ? "MULTIPLE"
         : thread_level_ == MPI_THREAD_SERIALIZED ? "SERIALIZED"
                                                  : "low");
  return os.str();
}

void MpiEnv::abort(int exit_code) const {
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace wmtp
