// A rank that stops answering mid-job must not hang the others (run by test_mpi_watchdog.sh).
// `mpi_hang TIMEOUT_S stop|sleep all_reduce|any_rank`: after a warm-up all-reduce, the last rank
// either stops itself (SIGSTOP: a frozen node, every thread of it, its watchdog's too) or sleeps
// for 10 minutes (alive, but never arrives), while the others enter the collective under test:
// the tensor all-reduce of the runtime's communicator, or any_rank (mpi_util.h) on the world.
// With [runtime] collective_timeout_s = TIMEOUT_S the watchdog must end the job, naming the
// collective and the missing rank. Exit 3 means the collective completed: nothing was aborted.
#include <ATen/ATen.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/mpi_env.h"
#include "comm/runtime.h"
#include "core/check.h"

int main(int argc, char** argv) {
  wmtp::MpiEnv mpi(&argc, &argv);
  if (argc != 4) {
    std::fprintf(stderr, "usage: mpi_hang TIMEOUT_S stop|sleep all_reduce|any_rank\n");
    return 2;
  }
  const std::string mode = argv[2], op = argv[3];
  wmtp::RuntimeConfig cfg;
  cfg.device = wmtp::RuntimeDevice::Cpu;
  cfg.communicator = wmtp::CommunicatorKind::Mpi;
  cfg.collective_timeout_s = std::atof(argv[1]);
  wmtp::Runtime rt = wmtp::make_runtime(mpi, cfg);
  at::Tensor t = at::ones({1024});
  rt.comm->all_reduce(t, wmtp::ReduceOp::Sum);  // warm-up: every rank connected
  std::printf("%s: warm-up all_reduce done: %g\n", wmtp::rank_and_host().c_str(), t[0].item<double>());
  std::fflush(stdout);
  if (mpi.rank() == mpi.world_size() - 1) {
    if (mode == "stop") std::raise(SIGSTOP);
    else
      std::this_thread::sleep_for(std::chrono::minutes(10));
  }
  if (op == "any_rank") wmtp::any_rank(mpi.world(), false);
  else
    rt.comm->all_reduce(t, wmtp::ReduceOp::Sum);
  std::printf("%s: not aborted: the collective completed\n", wmtp::rank_and_host().c_str());
  return 3;
}
