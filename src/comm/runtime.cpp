// Runtime: device choice, the one-GPU-per-rank check, and the communicators of a run.
#include "comm/runtime.h"

#include <mpi.h>

#include <map>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "comm/agree.h"
#include "comm/device.h"
#include "comm/mpi_env.h"
#include "comm/mpi_util.h"
#include "comm/staged_communicator.h"
#ifdef WMTP_WITH_CUDA
#include "comm/nccl_communicator.h"
#endif

namespace wmtp {

RuntimePlan plan_runtime(const RuntimeConfig& cfg, const NodeFacts& node) {
  RuntimePlan plan;
  const bool have_gpu = node.built_with_cuda && node.gpu_count > 0;
  if (cfg.device == RuntimeDevice::Cuda && !have_gpu)
    throw_usage("[runtime] device = \"cuda\" but ", node.host.empty() ? "this node" : node.host,
                " has no GPU for wmtp: ", node.no_gpu_why.empty() ? "no GPU visible" : node.no_gpu_why,
                " (device = \"auto\" falls back to the CPU)");
  const bool gpu = cfg.device == RuntimeDevice::Cuda || (cfg.device == RuntimeDevice::Auto && have_gpu);

  plan.communicator = cfg.communicator != CommunicatorKind::Auto ? cfg.communicator
                      : gpu                                      ? CommunicatorKind::Nccl
                                                                 : CommunicatorKind::Mpi;
  if (plan.communicator == CommunicatorKind::Nccl && !gpu)
    throw_usage("[runtime] communicator = \"nccl\" needs GPUs, but the device is the CPU (",
                cfg.device == RuntimeDevice::Cpu ? "device = \"cpu\"" : "no GPU found: " + node.no_gpu_why,
                "); use communicator = \"mpi\" or \"auto\"");
  if (plan.communicator == CommunicatorKind::Mpi && gpu)
    throw_usage(
        "[runtime] communicator = \"mpi\" reduces host tensors only, but the device is a GPU; use \"nccl\" "
        "(one GPU per rank) or \"staged\" (MPI through pinned host buffers), or device = \"cpu\"");

  if (gpu) {
    // All GPUs visible to every rank: the local rank's. One visible GPU (Slurm --gpus-per-task=1,
    // or several ranks sharing one): that one. Otherwise round-robin; NCCL's distinctness check
    // (shared_gpu_problem, by PCI bus id) then decides whether sharing is allowed.
    int index = node.gpu_count >= node.local_size ? node.local_rank
                : node.gpu_count == 1             ? 0
                                                  : node.local_rank % node.gpu_count;
    plan.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return plan;
}

std::string shared_gpu_problem(const std::vector<std::string>& bus_ids, const std::string& host, int gpu_count) {
  std::map<std::string, std::vector<size_t>> by_gpu;
  for (size_t i = 0; i < bus_ids.size(); ++i) by_gpu[bus_ids[i]].push_back(i);
  for (const auto& [id, ranks] : by_gpu) {
    if (ranks.size() < 2) continue;
    std::ostringstream os;
    os << host << " runs " << bus_ids.size() << " ranks but has " << gpu_count << " GPU(s) for them: node-local ranks";
    for (size_t r : ranks) os << " " << r;
    os << " would share GPU " << id
       << "; NCCL needs one GPU per rank. Start one rank per GPU (srun --ntasks-per-node = GPUs per node, "
          "or mpirun -np <GPUs>), or set [runtime] communicator = \"staged\" to share GPUs over MPI (slow: tests)";
    return os.str();
  }
  return "";
}

std::string Runtime::describe() const {
  std::ostringstream os;
  os << "device " << device.str() << " (" << device_name << "), communicator " << (comm ? comm->backend() : "none");
  if (groups)
    os << "; shard groups of " << groups->layout.group_size << " rank(s) x " << groups->layout.replicas()
       << " replica(s)";
  return os.str();
}

std::unique_ptr<Communicator> make_communicator(CommunicatorKind kind, MPI_Comm comm, c10::Device device,
                                                double collective_timeout_s) {
  switch (kind) {
    case CommunicatorKind::Mpi: return std::make_unique<MpiCommunicator>(comm);
    case CommunicatorKind::Staged: return std::make_unique<StagedCommunicator>(comm);
    case CommunicatorKind::Nccl:
#ifdef WMTP_WITH_CUDA
      return std::make_unique<NcclCommunicator>(comm, int(device.index()), collective_timeout_s);
#else
      (void)device, (void)collective_timeout_s;
      throw_usage("[runtime] communicator = \"nccl\": this wmtp was built without CUDA/NCCL");
#endif
    case CommunicatorKind::Auto: break;
  }
  throw_runtime("make_communicator: the communicator kind must be decided (plan_runtime)");
}

void add_shard_groups(Runtime& rt, MpiEnv& mpi, int group_size) {
  const GroupLayout layout = plan_groups(group_size, rt.node.rank_hosts);  // the same hosts on every rank
  rt.groups = std::make_unique<ShardGroups>(make_shard_groups(mpi.world(), layout, [&](MPI_Comm c) {
    return make_communicator(rt.kind, c, rt.device, rt.collective_timeout_s);
  }));
}

Runtime make_runtime(MpiEnv& mpi, const RuntimeConfig& cfg) {
  NodeFacts node;
  node.built_with_cuda = built_with_cuda();
  node.local_rank = mpi.local_rank();
  node.local_size = mpi.local_size();
  node.host = mpi.host();
  node.rank_hosts = all_gather_bytes(mpi.world(), node.host);
  // Only ask the driver when a GPU may be used: device = "cpu" must work without one.
  if (cfg.device != RuntimeDevice::Cpu) node.gpu_count = cuda_device_count(&node.no_gpu_why);

  // A problem on any rank (no GPU on one node) is the same usage error on every rank.
  const RuntimePlan plan = agreed(mpi.world(), [&] { return plan_runtime(cfg, node); });

  if (plan.device.is_cuda()) {
    use_device(plan.device);
    // One GPU per NCCL rank, checked by physical id (CUDA_VISIBLE_DEVICES may renumber): each node's
    // first rank looks at its node's ids, and every rank agrees on what any node found.
    const std::vector<std::string> ids = gather_bytes(mpi.node(), device_bus_id(plan.device), 0);
    std::optional<Error> shared;
    if (plan.communicator == CommunicatorKind::Nccl && mpi.local_rank() == 0) {
      std::string problem = shared_gpu_problem(ids, node.host, node.gpu_count);
      if (!problem.empty()) shared = Error(ErrorKind::Usage, problem);
    }
    throw_if_any_failed(mpi.world(), shared);
  }

  Runtime rt;
  // Before the communicators: they duplicate the world communicator and so inherit the watch and
  // the byte counting.
  rt.watch = std::make_unique<MpiWatch>(mpi.world(), cfg.collective_timeout_s, cfg.checkpoint_write_timeout_s);
  rt.links = std::make_unique<LinkCounting>(mpi.world(), node.rank_hosts);
  rt.node = node;
  rt.device = plan.device;
  rt.kind = plan.communicator;
  rt.collective_timeout_s = cfg.collective_timeout_s;
  rt.device_name = device_name(plan.device);
  rt.cpu_comm = std::make_unique<MpiCommunicator>(mpi.world());
  rt.comm = make_communicator(plan.communicator, mpi.world(), plan.device, cfg.collective_timeout_s);
  return rt;
}

}  // namespace wmtp
