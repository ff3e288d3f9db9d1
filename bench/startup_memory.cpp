// bench-startup-memory: peak RSS per rank of the trainer's start-up (sharding engine + AdamW state,
// parameters initialized), the old way — every rank builds the whole fp32 model and copies its shards
// (load_full(init_params)) — beside the sharded way (init_shards with the counter-based generator),
// at np 1, 2, 4, 8. Prints figures and the ratio; asserts nothing.
//
//   make bench && build/bench/bench-startup-memory [--dim 1024] [--layers 8] [--np 1,2,4,8]
//
// The model (default dim 1024, 8 layers, 8 heads, n_future 4, vocab 32000: 168M parameters, 0.63 GiB
// in fp32) is small enough for the 2-core dev machine; the saving per rank is the whole fp32 model
// (~28 GB at 7B). Each measurement is a fresh `mpirun -np N` of this binary with --worker.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/mpi_env.h"
#include "model/mtp.h"
#include "shard/memory_stats.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"

namespace {

double peak_rss_gib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / double(1 << 20);  // KiB on Linux
}

wmtp::ModelArgs args_of(int64_t dim, int64_t layers) {
  wmtp::ModelArgs a;
  a.dim = dim;
  a.n_layers = layers;
  a.n_heads = 8;
  a.n_future_tokens = 4;
  a.vocab_size = 32000;
  a.max_seq_len = 2048;
  return a;
}

int worker(const std::string& mode, int64_t dim, int64_t layers, int argc, char** argv_in) {
  char** argv = argv_in;
  wmtp::MpiEnv mpi(&argc, &argv);
  wmtp::MpiCommunicator comm(mpi.world());
  const double before = peak_rss_gib();
  wmtp::MtpModel model(args_of(dim, layers));
  wmtp::ShardingConfig sc;  // full_shard, bf16
  auto engine = std::make_unique<wmtp::ShardedModel>(model.param_specs(), comm, sc);
  if (mode == "full") engine->load_full(model.init_params(7));
  else
    engine->init_shards(
        [&](const std::string& f, int64_t o, const at::Tensor& out) { model.init_range(f, o, out, 7); });
  wmtp::ShardedAdamW opt(*engine, wmtp::OptimizerConfig{});
  const double peak = comm.all_reduce_scalar(peak_rss_gib(), wmtp::ReduceOp::Max);
  const double base = comm.all_reduce_scalar(before, wmtp::ReduceOp::Max);
  const double state = double(opt.memory_stats().model_state_bytes()) / double(1 << 30);
  if (comm.rank() == 0) printf("RESULT %s %d %.3f %.3f %.3f\n", mode.c_str(), comm.size(), peak, base, state);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t dim = 1024, layers = 8;
  std::string nps = "1,2,4,8", worker_mode;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dim") dim = std::atoll(argv[i + 1]);
    else if (a == "--layers")
      layers = std::atoll(argv[i + 1]);
    else if (a == "--np")
      nps = argv[i + 1];
    else if (a == "--worker")
      worker_mode = argv[i + 1];
  }
  if (!worker_mode.empty()) return worker(worker_mode, dim, layers, argc, argv);

  int64_t params = 0;
  for (const auto& s : wmtp::MtpModel(args_of(dim, layers)).param_specs()) params += s.numel();
  printf(
      "start-up peak RSS per rank (max over ranks): MTP dim %lld, %lld layers, n_future 4, vocab 32000, %.0fM params "
      "(%.2f GiB fp32), full_shard bf16, engine + AdamW state\n",
      (long long)dim, (long long)layers, params / 1e6, 4.0 * double(params) / double(1 << 30));
  printf("%4s %14s %14s %14s %16s %8s\n", "np", "model state", "full model", "sharded init", "saved per rank", "ratio");
  const std::string self = argv[0];
  const std::string mpirun = "mpirun --oversubscribe" + std::string(getuid() == 0 ? " --allow-run-as-root" : "");
  for (size_t p = 0; p < nps.size();) {
    size_t q = nps.find(',', p);
    const std::string np = nps.substr(p, q - p);
    p = q == std::string::npos ? nps.size() : q + 1;
    double peak[2] = {0, 0}, state = 0;
    for (int m = 0; m < 2; ++m) {
      const std::string mode = m == 0 ? "full" : "sharded";
      const std::string cmd = "OMP_NUM_THREADS=1 " + mpirun + " -x OMP_NUM_THREADS -np " + np + " " + self + " --dim " +
                              std::to_string(dim) + " --layers " + std::to_string(layers) + " --worker " + mode;
      FILE* f = popen(cmd.c_str(), "r");
      char line[512];
      while (f && fgets(line, sizeof line, f)) {
        char got[32];
        int n = 0;
        double pk = 0, base = 0, st = 0;
        if (sscanf(line, "RESULT %31s %d %lf %lf %lf", got, &n, &pk, &base, &st) == 5) peak[m] = pk, state = st;
      }
      if (f) pclose(f);
    }
    printf("%4s %11.2f GiB %11.2f GiB %11.2f GiB %13.2f GiB %8.2f\n", np.c_str(), state, peak[0], peak[1],
           peak[0] - peak[1], peak[1] > 0 ? peak[0] / peak[1] : 0.0);
    fflush(stdout);
  }
  return 0;
}
