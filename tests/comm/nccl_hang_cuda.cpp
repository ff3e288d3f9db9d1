// A stuck NCCL collective ends the job instead of hanging it (CUDA builds; run by
// test_nccl_watchdog_cuda.sh). After a warm-up all-reduce (NCCL set up, kernels loaded: the first
// launch of a kernel may wait for the whole device, which would stop this program before it posts
// the collective under test), the current stream is held by a host function that sleeps, so the
// all-reduce queued behind it cannot finish — as when a peer never joins. With
// [runtime] collective_timeout_s = 2 the watchdog must print this rank and the collective and end
// the job long before the stream would free itself, although the main thread is blocked in a device
// synchronization and ncclCommAbort itself waits for the device. Exit 3 means it did not.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "comm/device.h"
#include "comm/mpi_env.h"
#include "comm/runtime.h"

int main(int argc, char** argv) {
  wmtp::MpiEnv mpi(&argc, &argv);
  wmtp::RuntimeConfig cfg;
  cfg.device = wmtp::RuntimeDevice::Cuda;
  cfg.communicator = wmtp::CommunicatorKind::Nccl;
  cfg.collective_timeout_s = 2;
  wmtp::Runtime rt = wmtp::make_runtime(mpi, cfg);
  at::Tensor t = at::ones({1024}, at::TensorOptions().device(rt.device));
  rt.comm->all_reduce(t, wmtp::ReduceOp::Sum);  // warm-up: completes
  wmtp::synchronize(rt.device);
  std::printf("warm-up all_reduce done: %g\n", t[0].item<double>());
  const auto stream = c10::cuda::getCurrentCUDAStream(rt.device.index()).stream();
  cudaLaunchHostFunc(
      stream, [](void*) { std::this_thread::sleep_for(std::chrono::seconds(120)); }, nullptr);
  rt.comm->all_reduce(t, wmtp::ReduceOp::Sum);  // queued behind the sleeping host function
  std::printf("all_reduce posted; waiting for the device\n");
  std::fflush(stdout);
  wmtp::synchronize(rt.device);  // ~120 s unless the watchdog ends the job first
  std::printf("not aborted: the collective finished after the stream was released\n");
  return 3;
}
