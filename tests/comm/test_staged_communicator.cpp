// StagedCommunicator on the CPU under mpirun: the communicator conformance suite with host tensors
// forced through the staging path (copy out, MPI, copy back: what runs for GPU tensors), and with
// host tensors passed to MPI directly (what scalars and statistics do on a GPU run).
#include "comm_conformance.h"
#include "comm/staged_communicator.h"

namespace wmtp::conformance {
namespace {

INSTANTIATE_TEST_SUITE_P(
    Staged, CommConformance,
    ::testing::Values(Backend{"staged", [] { return std::make_unique<StagedCommunicator>(test::mpi().world(), true); }},
                      Backend{"host_direct",
                              [] { return std::make_unique<StagedCommunicator>(test::mpi().world(), false); }}),
    backend_name);

}  // namespace
}  // namespace wmtp::conformance
