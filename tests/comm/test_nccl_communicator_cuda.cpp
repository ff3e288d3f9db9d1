// NcclCommunicator on GPU tensors (CUDA builds): the conformance suite at one rank per GPU (bf16
// reduced natively must equal the widened MPI result on these exact inputs), and host tensors
// (scalars, counts) reduced over MPI by the same communicator.
#include <gtest/gtest.h>

#include "comm_conformance.h"
#include "comm/device.h"
#include "comm/nccl_communicator.h"

namespace wmtp::conformance {
namespace {

c10::Device my_gpu() {
  const int n = cuda_device_count();
  if (n < test::mpi().local_size())
    throw Error(ErrorKind::Runtime, detail::concat("test_nccl_communicator_cuda needs one GPU per rank: ",
                                                   test::mpi().local_size(), " ranks, ", n, " GPU(s)"));
  c10::Device d(c10::kCUDA, static_cast<c10::DeviceIndex>(test::mpi().local_rank()));
  use_device(d);
  return d;
}

INSTANTIATE_TEST_SUITE_P(Nccl, CommConformance,
                         ::testing::Values(Backend{"nccl",
                                                   [] {
                                                     return std::make_unique<NcclCommunicator>(
                                                         test::mpi().world(), int(test::mpi().local_rank()), 60.0);
                                                   },
                                                   my_gpu}),
                         backend_name);

}  // namespace
}  // namespace wmtp::conformance
