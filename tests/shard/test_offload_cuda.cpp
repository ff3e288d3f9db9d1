// CPU offload on a GPU (CUDA builds, mpirun -np 1 and 2 on one GPU through the staged communicator):
// the masters and moments sit in page-locked host memory, the AdamW step runs on the CPU, the
// device holds what the plan says (allocator figures), and 20 fp32 steps give the losses of the run
// without offload within 1e-6 relative. The checkpoint pieces are compared too: bitwise equality
// needs the CPU's and the GPU's AdamW kernels to round alike (ATen's addcdiv associates differently
// on the two), so the test reports the largest difference and bounds it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "core/error.h"
#include "comm/device.h"
#include "comm/staged_communicator.h"
#include "offload_run.h"
#include "rel_diff.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

c10::Device my_gpu() {
  const int n = cuda_device_count();
  if (n == 0) throw Error(ErrorKind::Runtime, "test_offload_cuda needs a GPU (CUDA build): none visible");
  c10::Device d(c10::kCUDA, static_cast<c10::DeviceIndex>(mpi().local_rank() % n));
  use_device(d);
  return d;
}

double worst_piece_diff(const std::vector<TensorPiece>& a, const std::vector<TensorPiece>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) worst = std::max(worst, rel_diff(a[i].data, b[i].data));
  return worst;
}

TEST(OffloadCuda, SameLossesAsWithoutOffloadAndStateOnTheHost) {
  const c10::Device gpu = my_gpu();
  StagedCommunicator comm(mpi().world());
  for (std::string dtype : {"fp32", "bf16"}) {
    ShardingConfig sc;
    test::set_config(sc, "param_dtype=" + dtype);
    const int steps = dtype == "fp32" ? 20 : 5;
    const OffloadRun none = run_offload(sc, comm, gpu, steps);
    for (std::string offload : {"optimizer", "full"}) {
      test::set_config(sc, "offload=" + offload);
      const std::string what = dtype + " offload " + offload;
      const OffloadRun r = run_offload(sc, comm, gpu, steps);
      const double loss_diff = rel_diff(at::tensor(r.losses), at::tensor(none.losses));
      const double param_diff = worst_piece_diff(r.params, none.params);
      printf("%s: losses within %.3g relative; parameters within %.3g (%d of %zu pieces differ bitwise)\n",
             what.c_str(), loss_diff, param_diff, differing_pieces(r.params, none.params), r.params.size());
      if (dtype == "fp32") {
        EXPECT_LE(loss_diff, 1e-6) << what;
      }
      EXPECT_LE(param_diff, dtype == "fp32" ? 1e-5 : 1e-2) << what;
    }
  }
}

TEST(OffloadCuda, MastersAreInPinnedHostMemoryAndTheDeviceHoldsTheRest) {
  const c10::Device gpu = my_gpu();
  StagedCommunicator comm(mpi().world());
  MtpModel model(tiny_mtp_args());
  for (std::string offload : {"none", "optimizer", "full"}) {
    ShardingConfig sc;
    test::set_config(sc, "offload=" + offload);
    synchronize(gpu);
    const int64_t before = device_memory(gpu).allocated;
    {
      ShardedModel engine(model.param_specs(), comm, sc, gpu);
      ShardedAdamW opt(engine, OptimizerConfig{});
      const int64_t on_device = device_memory(gpu).allocated - before;
      const MemoryStats m = opt.memory_stats();
      for (const TrainableShard& sh : engine.trainable_shards()) {
        EXPECT_EQ(sh.master.is_cuda(), offload == "none") << offload;
        if (offload != "none") {
          EXPECT_TRUE(sh.master.is_pinned()) << offload;
        }
        EXPECT_EQ(sh.grad.is_cuda(), offload != "full") << offload;
      }
      // Before any step no param_dtype copy exists yet: the device holds the rest of the state.
      EXPECT_NEAR(double(on_device), double(m.device_state_bytes() - m.cast_bytes), 1.0 * (1 << 20)) << offload;
    }
  }
}

}  // namespace
}  // namespace wmtp::test
