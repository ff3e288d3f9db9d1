// Runtime: what a run needs for its device, built in one call. `[runtime]` picks the device and the
// device communicator; make_runtime() chooses this rank's GPU, checks the node has one per rank (when
// NCCL needs it), and builds the communicators:
//
//   Runtime rt = make_runtime(mpi, cfg.runtime);
//   ShardedModel engine(specs, *rt.comm, cfg.sharding, rt.device);  // shards, gathers, grads on rt.device
//   batch.tokens = to_device(batch.tokens, rt.device);               // per micro-batch (comm/device.h)
//   save_training_checkpoint(dir, keep_last, rt.cpu_comm->comm(), header, parts);  // HDF5 over MPI
//
// Devices: "cpu"; "cuda" (one GPU per rank: the node-local rank's, MpiEnv::local_rank(); with
// CUDA_VISIBLE_DEVICES narrowed to one GPU per task, as Slurm's --gpus-per-task does, that one);
// "auto" = cuda when this wmtp was built with CUDA and the machine has a GPU, else cpu.
// Communicators for device tensors: "nccl" (GPU; one GPU per rank), "staged" (device tensors over
// MPI through pinned host buffers: several ranks may share a GPU, for tests on a one-GPU machine),
// "mpi" (CPU only); "auto" = nccl on a GPU, mpi on the CPU. Host tensors (scalars, statistics) work
// with every communicator. `cpu_comm` (MPI over the world, CPU tensors) is for agreement, signals,
// counts and HDF5.
// Every communicator of the runtime counts the bytes it sends by link (link_bytes.h: inside a node or
// across nodes, from every rank's host name) into `links`. Hybrid sharding adds its group and replica
// communicators once, at start (add_shard_groups).
#pragma once
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/link_bytes.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_watch.h"
#include "comm/shard_groups.h"

namespace wmtp {

class MpiEnv;

enum class RuntimeDevice { Auto, Cpu, Cuda };             // [runtime] device
enum class CommunicatorKind { Auto, Nccl, Staged, Mpi };  // [runtime] communicator

struct RuntimeConfig {
  RuntimeDevice device = RuntimeDevice::Auto;
  CommunicatorKind communicator = CommunicatorKind::Auto;
  double collective_timeout_s = 600;
  double checkpoint_write_timeout_s = 1800;
  // Planning (--dry-run) for the machines the job will run on, e.g. from a login node without a GPU.
  std::string gpu_name;         // "H100", "H200", "A100-40GB", ...: its capacity is the device budget
  double gpu_memory_gib = 0;    // the device budget itself (overrides gpu_name and the visible GPU)
  double host_memory_gib = 0;   // RAM per node (0 = this machine's)
  int ranks_per_node = 0;       // ranks sharing a node's RAM (0 = GPU: min(world, 8); CPU: world)
  std::string machine_profile;  // --dry-run's time plan: the rates of the machine (plan/machine_profile.h)
  template <class V>
  void visit(V& v) {
    v.choice("device", device, {"auto", "cpu", "cuda"},
             "where the model, gradients, optimizer state and batches live: auto = cuda when built with CUDA and a "
             "GPU is visible, else cpu; cuda = one GPU per rank, chosen by node-local rank");
    v.choice("communicator", communicator, {"auto", "nccl", "staged", "mpi"},
             "collectives on device tensors: auto = nccl on GPUs, mpi on CPUs; staged = MPI through pinned host "
             "buffers (several ranks may share a GPU: tests); mpi = CPU tensors only");
    v.field("collective_timeout_s", collective_timeout_s,
            "end the job (exit 75: requeue and resume) when an NCCL or MPI collective has not completed after this "
            "many seconds, naming the collective and, for MPI, the ranks that did not arrive: a dead, stuck or "
            "cut-off peer (0 = no timeout)");
    v.field("checkpoint_write_timeout_s", checkpoint_write_timeout_s,
            "end the job the same way (exit 75) when a checkpoint write, HDF5's MPI-IO included, has not finished "
            "after this many seconds: a peer lost mid-write; the unfinished file never becomes `latest` (0 = no "
            "limit on the whole write; its own collectives still have collective_timeout_s; MPI watchdog only, "
            "off with collective_timeout_s = 0)");
    v.field("gpu_name", gpu_name,
            "--dry-run: plan for this GPU when none is visible (H100, H200, A100-80GB, A100-40GB, L40S): its capacity "
            "is the per-rank budget");
    v.field("gpu_memory_gib", gpu_memory_gib,
            "--dry-run: per-rank GPU budget in GiB (overrides gpu_name; 0 = from it)");
    v.field("host_memory_gib", host_memory_gib, "--dry-run: RAM per node in GiB (0 = this machine's); 90 % is planned");
    v.field("ranks_per_node", ranks_per_node,
            "--dry-run: ranks sharing one node's RAM (0 = the machine profile's, else min(world size, 8) on GPUs, "
            "the world size on CPUs)");
    v.field("machine_profile", machine_profile,
            "--dry-run: a machine profile (TOML: bin/calibrate-machine writes one; configs/machines/ holds published "
            "ones) for the time plan of one step: compute, exposed communication, step time, tokens/s");
  }
};

// Where this rank runs and over what, decided from the config and the facts of its node (pure:
// tests call it with any facts). Throws Error(Usage) naming [runtime] keys when they cannot be met.
struct RuntimePlan {
  c10::Device device = c10::Device(c10::kCPU);
  CommunicatorKind communicator = CommunicatorKind::Mpi;  // Nccl, Staged or Mpi: never Auto
};
struct NodeFacts {
  bool built_with_cuda = false;
  int gpu_count = 0;       // visible to this process
  std::string no_gpu_why;  // why gpu_count is 0
  int local_rank = 0, local_size = 1;
  std::string host;
  std::vector<std::string> rank_hosts;  // every rank's host, in world rank order: the nodes of the job
};
RuntimePlan plan_runtime(const RuntimeConfig& cfg, const NodeFacts& node);

// NCCL needs a GPU of its own per rank. `bus_ids[i]`: the PCI bus id of node-local rank i's GPU.
// "" when every id is distinct, else a message naming the node, the ranks and the GPU they share.
std::string shared_gpu_problem(const std::vector<std::string>& bus_ids, const std::string& host, int gpu_count);

struct Runtime {
  // First: destroyed last, after the communicators they watch and count.
  std::unique_ptr<MpiWatch> watch;      // MPI collectives under [runtime] collective_timeout_s
  std::unique_ptr<LinkCounting> links;  // bytes sent inside the node and across nodes (links->counter())
  NodeFacts node;                       // this rank's node, and every rank's host
  c10::Device device = c10::Device(c10::kCPU);
  CommunicatorKind kind = CommunicatorKind::Mpi;  // of `comm` and the shard groups' communicators
  double collective_timeout_s = 600;
  std::unique_ptr<Communicator> comm;         // device collectives (the sharding engine)
  std::unique_ptr<MpiCommunicator> cpu_comm;  // MPI for CPU tensors: agreement, HDF5, signals (cpu_comm->comm())
  std::unique_ptr<ShardGroups> groups;        // hybrid sharding's group and replica communicators, or null
  std::string device_name;                    // "NVIDIA H100 80GB HBM3", "cpu"
  std::string describe() const;               // one line for the start-up log
};

// Collective over MPI_COMM_WORLD. Every rank agrees on failures: a problem on any rank (no GPU on one
// node, two NCCL ranks on one GPU) becomes the same usage error on every rank.
Runtime make_runtime(MpiEnv& mpi, const RuntimeConfig& cfg);

// Hybrid sharding's communicators, of the runtime's kind, on its device (collective over the world):
// groups of `group_size` ranks (0 = the ranks per node; plan_groups checks it against the hosts).
void add_shard_groups(Runtime& rt, MpiEnv& mpi, int group_size);

// A device communicator of `kind` over `comm` (MPI, staged, or NCCL on `device`).
std::unique_ptr<Communicator> make_communicator(CommunicatorKind kind, MPI_Comm comm, c10::Device device,
                                                double collective_timeout_s);

}  // namespace wmtp
