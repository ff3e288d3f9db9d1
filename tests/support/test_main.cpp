// gtest main for every test binary, one process or many under mpirun. MPI is initialized first;
// only rank 0 prints gtest's progress; each rank's verdict is all-reduced so a failure on any rank
// fails the test binary on every rank (no rank is special, none hangs).
#include <gtest/gtest.h>

#include <memory>

#include "test_util.h"

namespace wmtp::test {
namespace {
std::unique_ptr<MpiEnv> g_mpi;  // test-harness only: the library itself holds no globals
}
MpiEnv& mpi() { return *g_mpi; }
}  // namespace wmtp::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  wmtp::test::g_mpi = std::make_unique<wmtp::MpiEnv>(&argc, &argv);
  auto& env = *wmtp::test::g_mpi;
  if (env.rank() != 0) {
    // Other ranks report only their failures (gtest prints them through the failure listener).
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int local_fail = RUN_ALL_TESTS() != 0 ? 1 : 0;
  if (local_fail && env.rank() != 0) {
    fprintf(stderr, "[rank %d %s] some tests FAILED on this rank\n", env.rank(), env.host().c_str());
  }
  bool any_fail = wmtp::any_rank(env.world(), local_fail);
  if (env.rank() == 0 && any_fail && !local_fail) fprintf(stderr, "tests FAILED on another rank\n");
  wmtp::test::g_mpi.reset();
  return any_fail ? 1 : 0;
}
