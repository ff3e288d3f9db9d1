// bench-shard-step: the sharding engine on bench-small (dim 512, 8 layers, 8 heads, n_future 4,
// vocab 32000, seq 512, global batch 4 sequences per step split over the ranks, full fine-tuning,
// sequential unembedding). Prints, asserts nothing:
//   1. peak RSS per rank at N = 1, 2, 4 (full_shard) and the share of it that is model state;
//   2. full_shard vs no_shard step time at N = 2 (goal <= 1.10);
//   3. N = 1 engine (full_shard) vs plain single-process LibTorch (LocalParams + torch AdamW) on the
//      same model and batch (goal <= 1.05).
// Timings alternate the two contenders step by step in one process (side by side, same noise) and
// report medians over the timed steps.
//
//   build/bench/bench-shard-step [--dtype bf16|fp32] [--steps N] [--seq S] [--batch B]
//   mpirun -np 2 build/bench/bench-shard-step --mode strategies   (one measurement, by hand)
// Without mpirun it launches itself under mpirun (MPIEXEC, default "mpirun") for each measurement.
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/memory.h"
#include "core/timer.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_env.h"
#include "model/local_params.h"
#include "model/mtp.h"
#include "model/mtp_loss.h"
#include "model/mtp_pass.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"

namespace {

using namespace wmtp;

struct Options {
  std::string mode;  // "" = launcher; rss | strategies | plain
  std::string dtype = "bf16";
  int steps = 2;  // timed steps per contender (after one warm-up step each)
  int64_t seq = 512;
  int64_t batch = 4;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode") o.mode = v;
    else if (k == "--dtype")
      o.dtype = v;
    else if (k == "--steps")
      o.steps = std::atoi(v.c_str());
    else if (k == "--seq")
      o.seq = std::atoll(v.c_str());
    else if (k == "--batch")
      o.batch = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "bench-shard-step: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (o.dtype != "bf16" && o.dtype != "fp32") {
    std::fprintf(stderr, "bench-shard-step: --dtype must be bf16 or fp32\n");
    std::exit(2);
  }
  return o;
}

ModelArgs bench_small() {
  ModelArgs a;
  a.dim = 512;
  a.n_layers = 8;
  a.n_heads = 8;
  a.vocab_size = 32000;
  a.n_future_tokens = 4;
  a.max_seq_len = 2048;
  return a;
}

OptimizerConfig adamw() {
  OptimizerConfig c;
  c.lr = 1e-4;
  return c;
}

// This rank's rows of the step's global batch (rows r, r+N, ...), prompt = first 64 tokens.
MtpBatch rank_batch(const Options& o, int step, int rank, int world) {
  at::Generator gen = at::detail::createCPUGenerator(1000 + static_cast<uint64_t>(step));
  at::Tensor tokens = at::randint(1, 32000, {o.batch, o.seq}, gen);
  at::Tensor idx = at::arange(rank, o.batch, world, at::kLong);
  MtpBatch b;
  b.tokens = tokens.index_select(0, idx);
  b.labels = b.tokens.clone();
  b.labels.narrow(1, 0, std::min<int64_t>(64, o.seq)).fill_(-100);
  return b;
}

std::vector<double> global_counts(Communicator& comm, const MtpModel& m, const MtpBatch& b) {
  at::Tensor c = at::tensor(count_valid_targets(b.labels, m.n_future()), at::kLong);
  comm.all_reduce(c, ReduceOp::Sum);
  return std::vector<double>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// One optimizer step of the engine; returns seconds.
struct EngineRun {
  ShardedModel engine;
  ShardedAdamW opt;
  EngineRun(const MtpModel& m, Communicator& comm, const ShardingConfig& sc)
      : engine(m.param_specs(), comm, sc), opt(engine, adamw()) {
    engine.load_full(m.init_params(7));
  }
  double step(const MtpModel& m, Communicator& comm, const Options& o, int s) {
    MtpBatch b = rank_batch(o, s, comm.rank(), comm.size());
    comm.barrier();
    Timer t;
    opt.zero_grad();
    mtp_forward_backward(m, engine, b, global_counts(comm, m, b), MtpPassOptions{});
    opt.clip_grad_norm();
    opt.step();
    comm.barrier();
    return t.seconds();
  }
};

struct PlainRun {
  LocalParams local;
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> opt;
  PlainRun(const MtpModel& m, const Options& o)
      : local(m.param_specs(), m.init_params(7),
              o.dtype == "bf16" ? std::optional<at::ScalarType>(at::kBFloat16) : std::nullopt) {
    params = local.trainable_params();
    OptimizerConfig c = adamw();
    opt = std::make_unique<torch::optim::AdamW>(
        params,
        torch::optim::AdamWOptions(c.lr).betas({c.betas[0], c.betas[1]}).eps(c.eps).weight_decay(c.weight_decay));
  }
  double step(const MtpModel& m, const Options& o, int s) {
    MtpBatch b = rank_batch(o, s, 0, 1);
    Timer t;
    opt->zero_grad();
    auto counts = count_valid_targets(b.labels, m.n_future());
    mtp_forward_backward(m, local, b, std::vector<double>(counts.begin(), counts.end()), MtpPassOptions{});
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    opt->step();
    return t.seconds();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

ShardingConfig sharding(const Options& o, const std::string& strategy) {
  ShardingConfig sc;  // from the spellings on the command line, as [sharding] reads them
  ConfigSet set;
  set.add("sharding", sc);
  set.apply_overrides({"sharding.strategy=" + strategy, "sharding.param_dtype=" + o.dtype});
  return sc;
}

// ---- child modes (under mpirun) ----

int run_child(const Options& o, int argc, char** argv) {
  MpiEnv env(&argc, &argv);
  MpiCommunicator comm(env.world());
  const int cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  at::set_num_threads(std::max(1, cores / env.local_size()));
  MtpModel model(bench_small());
  const bool root = comm.rank() == 0;

  if (o.mode == "rss") {
    EngineRun run(model, comm, sharding(o, "full_shard"));
    std::vector<double> t;
    for (int s = 0; s < std::max(1, o.steps); ++s) t.push_back(run.step(model, comm, o, s));
    at::Tensor rss = at::zeros({comm.size()}, at::kLong);
    rss[comm.rank()] = peak_rss_bytes();
    comm.all_reduce(rss, ReduceOp::Sum);
    MemoryStats m = run.opt.memory_stats();
    if (root) {
      std::printf("RESULT rss world=%d model_state=%lld peak_gathered=%lld step_s=%.3f", comm.size(),
                  static_cast<long long>(m.model_state_bytes()), static_cast<long long>(m.peak_gathered_bytes),
                  median(t));
      for (int r = 0; r < comm.size(); ++r)
        std::printf(" rss%d=%lld", r, static_cast<long long>(rss[r].item<int64_t>()));
      std::printf("\n");
    }
  } else if (o.mode == "strategies") {
    EngineRun full(model, comm, sharding(o, "full_shard"));
    EngineRun none(model, comm, sharding(o, "no_shard"));
    std::vector<double> tf, tn;
    for (int s = 0; s <= o.steps; ++s) {
      double a = full.step(model, comm, o, s), b = none.step(model, comm, o, s);
      if (s > 0) tf.push_back(a), tn.push_back(b);  // step 0 warms up
    }
    if (root)
      std::printf("RESULT strategies world=%d full_shard_s=%.3f no_shard_s=%.3f ratio=%.3f\n", comm.size(), median(tf),
                  median(tn), median(tf) / median(tn));
  } else if (o.mode == "plain") {
    if (comm.size() != 1) {
      if (root) std::fprintf(stderr, "--mode plain runs on one rank\n");
      return 2;
    }
    EngineRun engine(model, comm, sharding(o, "full_shard"));
    PlainRun plain(model, o);
    std::vector<double> te, tp;
    for (int s = 0; s <= o.steps; ++s) {
      double a = engine.step(model, comm, o, s), b = plain.step(model, o, s);
      if (s > 0) te.push_back(a), tp.push_back(b);
    }
    std::printf("RESULT plain engine_s=%.3f plain_s=%.3f ratio=%.3f\n", median(te), median(tp),
                median(te) / median(tp));
  } else {
    if (root) std::fprintf(stderr, "bench-shard-step: unknown --mode %s (rss, strategies, plain)\n", o.mode.c_str());
    return 2;
  }
  return 0;
}

// ---- launcher ----

std::map<std::string, std::string> launch(const Options& o, const std::string& mode, int np) {
  const char* mpiexec = std::getenv("MPIEXEC");
  std::ostringstream cmd;
  cmd << (mpiexec ? mpiexec : "mpirun") << " --oversubscribe" << (geteuid() == 0 ? " --allow-run-as-root" : "")
      << " -np " << np << " /proc/" << getpid() << "/exe --mode " << mode << " --dtype " << o.dtype << " --steps "
      << o.steps << " --seq " << o.seq << " --batch " << o.batch << " 2>&1";
  std::map<std::string, std::string> kv;
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) return kv;
  char line[4096];
  Timer t;
  while (std::fgets(line, sizeof line, p)) {
    std::string s(line);
    if (s.rfind("RESULT ", 0) != 0) {
      std::fputs(line, stderr);  // the child's complaints, if any
      continue;
    }
    std::istringstream in(s.substr(7));
    std::string tok;
    in >> tok;
    while (in >> tok) {
      auto eq = tok.find('=');
      if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
    }
  }
  int rc = pclose(p);
  kv["wall_s"] = std::to_string(t.seconds());
  if (rc != 0) std::fprintf(stderr, "bench-shard-step: %s at np %d failed (status %d)\n", mode.c_str(), np, rc);
  return kv;
}

double num(const std::map<std::string, std::string>& kv, const std::string& k) {
  auto it = kv.find(k);
  return it == kv.end() ? 0.0 : std::atof(it->second.c_str());
}

int run_launcher(const Options& o) {
  const double mib = 1024.0 * 1024.0;
  std::printf(
      "bench-shard-step: bench-small (dim 512, 8 layers, 8 heads, n_future 4, vocab 32000), seq %lld, "
      "global batch %lld, %s, full fine-tuning, sequential unembedding; %d timed step(s) after 1 warm-up\n\n",
      static_cast<long long>(o.seq), static_cast<long long>(o.batch), o.dtype.c_str(), o.steps);

  std::printf("peak RSS per rank, full_shard (model state = fp32 master + grad + AdamW, per rank)\n");
  std::printf("%4s %14s %14s %16s %10s %12s %10s\n", "N", "max RSS MiB", "min RSS MiB", "model state MiB", "share",
              "gathered MiB", "wall s");
  for (int np : {1, 2, 4}) {
    Options r = o;
    r.steps = 1;
    auto kv = launch(r, "rss", np);
    double mx = 0, mn = 1e300;
    for (int i = 0; i < np; ++i) {
      double v = num(kv, "rss" + std::to_string(i));
      mx = std::max(mx, v), mn = std::min(mn, v);
    }
    double ms = num(kv, "model_state");
    std::printf("%4d %14.0f %14.0f %16.0f %9.1f%% %12.1f %10.0f\n", np, mx / mib, mn / mib, ms / mib,
                mx > 0 ? 100.0 * ms / mx : 0.0, num(kv, "peak_gathered") / mib, num(kv, "wall_s"));
    std::fflush(stdout);
  }

  auto st = launch(o, "strategies", 2);
  std::printf("\nN=2 step time: full_shard %.2f s, no_shard %.2f s, ratio %.3f (goal <= 1.10)\n",
              num(st, "full_shard_s"), num(st, "no_shard_s"), num(st, "ratio"));
  std::fflush(stdout);
  auto pl = launch(o, "plain", 1);
  std::printf("N=1 step time: engine %.2f s, plain LibTorch %.2f s, ratio %.3f (goal <= 1.05)\n", num(pl, "engine_s"),
              num(pl, "plain_s"), num(pl, "ratio"));
  return 0;
}

bool under_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.mode.empty() && !under_mpirun()) return run_launcher(o);
  if (o.mode.empty()) o.mode = "strategies";
  try {
    return run_child(o, argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-shard-step: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
