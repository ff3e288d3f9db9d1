// StagedCommunicator on GPU tensors (CUDA builds): the conformance suite with 1-4 ranks sharing the
// machine's GPUs (round-robin by node-local rank; several ranks per GPU is the point of staging).
#include <gtest/gtest.h>

#include "comm_conformance.h"
#include "comm/device.h"
#include "comm/staged_communicator.h"

namespace wmtp::conformance {
namespace {

c10::Device my_gpu() {
  const int n = cuda_device_count();
  if (n == 0) throw Error(ErrorKind::Runtime, "test_staged_communicator_cuda needs a GPU (CUDA build): none visible");
  c10::Device d(c10::kCUDA, static_cast<c10::DeviceIndex>(test::mpi().local_rank() % n));
  use_device(d);
  return d;
}

INSTANTIATE_TEST_SUITE_P(
    StagedCuda, CommConformance,
    ::testing::Values(Backend{"staged_cuda", [] { return std::make_unique<StagedCommunicator>(test::mpi().world()); },
                              my_gpu}),
    backend_name);

}  // namespace
}  // namespace wmtp::conformance
