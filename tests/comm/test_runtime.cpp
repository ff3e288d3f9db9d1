// Runtime: the device/communicator decision for every combination of config and node facts (pure),
// the one-GPU-per-NCCL-rank check, and make_runtime under mpirun on this (CPU) machine: the
// communicators it builds work, and a config no rank can meet is the same usage error on every rank.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/config.h"
#include "core/error.h"
#include "comm/device.h"
#include "comm/runtime.h"
#include "test_util.h"

namespace wmtp {
namespace {

NodeFacts facts(bool cuda, int gpus, int local_rank = 0, int local_size = 1) {
  NodeFacts f;
  f.built_with_cuda = cuda;
  f.gpu_count = gpus;
  f.no_gpu_why = gpus == 0 ? "no GPU here" : "";
  f.local_rank = local_rank;
  f.local_size = local_size;
  f.host = "node7";
  return f;
}
// Through the TOML's spellings, as --set gives them: the tests below check what each one means.
RuntimeConfig config(const std::string& device, const std::string& comm = "auto") {
  RuntimeConfig c;
  ConfigSet set;
  set.add("runtime", c);
  set.apply_overrides({"runtime.device=" + device, "runtime.communicator=" + comm});
  return c;
}
std::string usage_error(const RuntimeConfig& c, const NodeFacts& f) {
  try {
    plan_runtime(c, f);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_TRUE(e.agreed());
    return e.what();
  }
  return "";
}

TEST(PlanRuntime, AutoIsCudaOnlyWhenBuiltWithCudaAndAGpuIsVisible) {
  EXPECT_TRUE(plan_runtime(config("auto"), facts(false, 0)).device.is_cpu());
  EXPECT_TRUE(plan_runtime(config("auto"), facts(false, 8)).device.is_cpu());  // CPU LibTorch: GPUs unusable
  EXPECT_TRUE(plan_runtime(config("auto"), facts(true, 0)).device.is_cpu());
  RuntimePlan p = plan_runtime(config("auto"), facts(true, 4, 2, 4));
  EXPECT_EQ(p.device, c10::Device(c10::kCUDA, 2));
  EXPECT_EQ(p.communicator, CommunicatorKind::Nccl);
  EXPECT_EQ(plan_runtime(config("auto"), facts(true, 0)).communicator, CommunicatorKind::Mpi);
  EXPECT_EQ(plan_runtime(config("cpu"), facts(true, 4)).communicator, CommunicatorKind::Mpi);
  EXPECT_EQ(plan_runtime(config("cpu", "staged"), facts(true, 4)).communicator, CommunicatorKind::Staged);
  EXPECT_TRUE(plan_runtime(config("cpu"), facts(true, 4)).device.is_cpu());
}

TEST(PlanRuntime, OneGpuPerRankByLocalRank) {
  for (int r = 0; r < 8; ++r)
    EXPECT_EQ(plan_runtime(config("cuda"), facts(true, 8, r, 8)).device, c10::Device(c10::kCUDA, r));
  // Slurm --gpus-per-task=1: every task sees one GPU, its own, as device 0.
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(plan_runtime(config("cuda"), facts(true, 1, r, 4)).device, c10::Device(c10::kCUDA, 0));
  // More visible GPUs than ranks: the local rank's.
  EXPECT_EQ(plan_runtime(config("cuda"), facts(true, 8, 1, 2)).device, c10::Device(c10::kCUDA, 1));
  // Fewer: round-robin (allowed for staged; NCCL's bus-id check refuses the sharing).
  EXPECT_EQ(plan_runtime(config("cuda", "staged"), facts(true, 2, 3, 4)).device, c10::Device(c10::kCUDA, 1));
}

TEST(PlanRuntime, ImpossibleCombinationsAreUsageErrorsNamingTheKeys) {
  std::string e = usage_error(config("cuda"), facts(false, 0));
  EXPECT_NE(e.find("[runtime] device = \"cuda\""), std::string::npos) << e;
  EXPECT_NE(e.find("node7"), std::string::npos) << e;
  EXPECT_NE(e.find("no GPU here"), std::string::npos) << e;
  e = usage_error(config("cpu", "nccl"), facts(true, 4));
  EXPECT_NE(e.find("communicator = \"nccl\""), std::string::npos) << e;
  e = usage_error(config("auto", "nccl"), facts(true, 0));
  EXPECT_NE(e.find("no GPU"), std::string::npos) << e;
  e = usage_error(config("cuda", "mpi"), facts(true, 1));
  EXPECT_NE(e.find("staged"), std::string::npos) << e;
  EXPECT_EQ(usage_error(config("cpu", "staged"), facts(false, 0)), "");  // staged on the CPU: MPI
  EXPECT_EQ(usage_error(config("cuda", "staged"), facts(true, 1, 3, 4)), "");
}

TEST(SharedGpuProblem, NamesTheNodeRanksAndGpu) {
  EXPECT_EQ(shared_gpu_problem({"0000:3b:00.0", "0000:5e:00.0"}, "node7", 2), "");
  EXPECT_EQ(shared_gpu_problem({"0000:3b:00.0"}, "node7", 1), "");
  std::string e = shared_gpu_problem({"0000:3b:00.0", "0000:5e:00.0", "0000:3b:00.0"}, "node7", 2);
  EXPECT_NE(e.find("node7 runs 3 ranks but has 2 GPU(s)"), std::string::npos) << e;
  EXPECT_NE(e.find("ranks 0 2 would share GPU 0000:3b:00.0"), std::string::npos) << e;
  EXPECT_NE(e.find("communicator = \"staged\""), std::string::npos) << e;
}

// On this machine: whatever the build, device = "cpu" gives working communicators.
TEST(MakeRuntime, CpuRunsWithMpiOrStaged) {
  for (const char* kind : {"auto", "mpi", "staged"}) {
    Runtime rt = make_runtime(test::mpi(), config("cpu", kind));
    EXPECT_TRUE(rt.device.is_cpu());
    EXPECT_EQ(rt.comm->backend(), std::string(kind) == "staged" ? "staged" : "mpi");
    EXPECT_EQ(rt.cpu_comm->size(), test::mpi().world_size());
    at::Tensor t = at::full({3}, float(rt.comm->rank() + 1));
    rt.comm->all_reduce(t, ReduceOp::Sum);
    const int w = rt.comm->size();
    EXPECT_TRUE(at::equal(t, at::full({3}, float(w * (w + 1) / 2))));
    EXPECT_EQ(rt.cpu_comm->all_reduce_scalar(int64_t(1), ReduceOp::Sum), w);
    EXPECT_NE(rt.describe().find("device cpu"), std::string::npos) << rt.describe();
  }
}

// device = "auto" takes the GPU wherever this build and this machine have one. NCCL needs a GPU per
// rank, so where this run's ranks outnumber the node's GPUs (np 2 on a one-GPU machine) they share
// them through the staged communicator, as the end-to-end tests do (tests/train/e2e_lib.sh).
TEST(MakeRuntime, AutoFollowsTheBuildAndTheMachine) {
  const int gpus = built_with_cuda() ? cuda_device_count() : 0;
  const bool shared = gpus > 0 && gpus < test::mpi().local_size();
  Runtime rt = make_runtime(test::mpi(), config("auto", shared ? "staged" : "auto"));
  EXPECT_EQ(rt.device.is_cuda(), gpus > 0);
  EXPECT_EQ(rt.comm->backend(), gpus == 0 ? "mpi" : shared ? "staged" : "nccl");
  // The device communicator works on the device's tensors, whichever it is.
  at::Tensor t = at::full({3}, float(rt.comm->rank() + 1), at::TensorOptions().device(rt.device));
  rt.comm->all_reduce(t, ReduceOp::Sum);
  const int w = rt.comm->size();
  EXPECT_TRUE(at::equal(t.cpu(), at::full({3}, float(w * (w + 1) / 2))));
}

TEST(MakeRuntime, AnUnmeetableConfigIsOneAgreedUsageErrorOnEveryRank) {
  if (built_with_cuda() && cuda_device_count() > 0) {
    // On a GPU machine: NCCL on the CPU is refused on every rank alike.
    EXPECT_THROW(make_runtime(test::mpi(), config("cpu", "nccl")), Error);
    return;
  }
  try {
    make_runtime(test::mpi(), config("cuda"));
    ADD_FAILURE() << "device = \"cuda\" without a GPU was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(e.agreed());
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("[runtime] device = \"cuda\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wmtp
