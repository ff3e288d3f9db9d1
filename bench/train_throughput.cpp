// bench-train-throughput: train-baseline's step (full fine-tuning, full_shard) side by side with a
// plain-PyTorch script of the same model (bench/python/mtp_peer.py) run right after it, on the same
// batches and threads, with the same optimizer settings (AdamW, --lr, --weight-decay, betas (0.9,
// 0.95), eps 1e-8, clip 1.0) and a constant learning rate from the first step on both sides. Prints
// tokens/s, step time, MFU (train/flops.h: 6 x parameters per token, one definition for both),
// peak memory and the ratios, where wmtp's step goes (its perf/phase_* metrics), and a line per
// peer mode saying how that peer is configured; asserts nothing.
//
//   CPU (default): bench-small (dim 512, 8 layers, 8 heads, n_future 4, vocab 32000, seq 512,
//   micro-batch 4), fp32, train-baseline at np 1 and 2 (peak RSS beside the --dry-run estimate), then
//   the peer (eager, the build's own PyTorch: .venv-torch with `make bench`) with the np-1 run's threads.
//     make bench && build/bench/bench-train-throughput [--steps N] [--threads T] [--np 1,2]
//   GPU (one device): --device cuda [--model small|1b|3b|7b] [--peer-modes eager,compile,fsdp2] — bf16,
//   np 1, 20 timed steps (--steps), MFU against 989 TFLOP/s (H100/H200 bf16 dense; --peak-tflops to
//   change). The 1B config: dim 2048, 16 layers, 16 heads, n_future 4, vocab 32000, seq 2048,
//   micro-batch 4. 3b and 7b are configs/3b-1gpu.toml and configs/7b-1gpu.toml's models and settings
//   (micro-batch 1, activation checkpointing; 7b with offload "optimizer": AdamW on the CPU with
//   --threads, default all cores), without the peer unless --peer-modes is given. GPU rows add the
//   host's peak RSS. FSDP2 runs for reference only: no ratio is quoted against it (foreach AdamW, no
//   compile). --profile-steps N adds one more wmtp run that writes a LibTorch profiler trace of N
//   steps (bench-train/profile/trace_rank0.json), kept apart from the timed runs, and has each peer
//   profile one more step (torch.profiler's operator table, in its log bench-train/peer_<mode>.log).
//     build/bench/bench-train-throughput --device cuda --model 1b --peer-modes eager,compile,fsdp2
//
// Then (CPU) the pipelines side by side at np 1: train-rho1's step time over train-baseline's on the
// same model and batches (its step adds a frozen next-token reference forward — bench-small's trunk +
// one head — and a no-grad policy forward before the training step), runs interleaved `--repeat`
// times (default 2; 0 skips).
//
// --rounds R (default 1): the np runs and the peer alternate R times, each round's rows printed, then
// the per-round ratios (min / median / max): on a machine shared with other jobs one run of each
// side can land in different load and the ratio swings either way.
//
// Options: --dtype fp32|bf16, --lr X (default 1e-4), --weight-decay X (default 0.01), --python PATH
// (default: the first that imports torch of the build's WMTP_TORCH_PYTHON, python3, /usr/bin/python3; --python none skips the
// peer), --set KEY=VALUE (extra train-baseline override, repeatable; with --device cuda
// "runtime.device=cuda" is added; optimizer settings go through --lr / --weight-decay so both sides
// get them).
//
// It writes long synthetic samples (a short prompt and a solution of about seq tokens), tokenizes
// them with the tiny bundled tokenizer (data/make_tokenizer.sh), launches the real train-baseline
// from bin/ under mpirun, and hands the peer the first batches of the same dataset, collated the same
// way, as raw int64 (tokens and labels). Step 1 of each side is warm-up and not counted.
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/collate.h"
#include "data/data_config.h"
#include "data/dataset.h"
#include "train/flops.h"

namespace {

const std::string g_src = WMTP_SOURCE_DIR_BENCH;

int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Options {
  std::string device = "cpu", model = "small", dtype, python, peer_modes;
  std::vector<int> nps;
  std::vector<std::string> sets;
  int steps = 0, threads = 2, repeat = 2, rounds = 1, profile_steps = 0;
  double peak_tflops = 0, lr = 1e-4, weight_decay = 0.01;
};

struct ModelShape {
  int64_t dim, layers, heads, vocab = 32000, seq, micro = 4, n_future = 4;
};

struct Figures {
  double tokens_per_sec = 0, step_time = 0, peak_gib = 0, mfu = 0, host_peak_gib = 0;
  std::vector<std::pair<std::string, double>> phases_ms;  // perf/phase_*_ms, mean over the timed steps
  bool ok = false;
};

Options parse(int argc, char** argv) {
  Options o;
  std::string nps;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "bench-train-throughput: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--device") o.device = next();
    else if (a == "--model")
      o.model = next();
    else if (a == "--dtype")
      o.dtype = next();
    else if (a == "--steps")
      o.steps = std::atoi(next().c_str());
    else if (a == "--threads")
      o.threads = std::atoi(next().c_str());
    else if (a == "--np")
      nps = next();
    else if (a == "--python")
      o.python = next();
    else if (a == "--peer-modes")
      o.peer_modes = next();
    else if (a == "--peak-tflops")
      o.peak_tflops = std::atof(next().c_str());
    else if (a == "--set")
      o.sets.push_back(next());
    else if (a == "--repeat")
      o.repeat = std::atoi(next().c_str());
    else if (a == "--rounds")
      o.rounds = std::max(1, std::atoi(next().c_str()));
    else if (a == "--lr")
      o.lr = std::atof(next().c_str());
    else if (a == "--weight-decay")
      o.weight_decay = std::atof(next().c_str());
    else if (a == "--profile-steps")
      o.profile_steps = std::atoi(next().c_str());
    else {
      fprintf(stderr,
              "usage: bench-train-throughput [--device cpu|cuda] [--model small|1b|3b|7b] [--dtype fp32|bf16] "
              "[--steps N] [--threads T] [--np 1,2] [--python PATH|none] [--peer-modes eager,compile,fsdp2] "
              "[--peak-tflops X] [--repeat N] [--rounds R] [--lr X] [--weight-decay X] [--profile-steps N] "
              "[--set KEY=VALUE]...\n");
      std::exit(2);
    }
  }
  const bool gpu = o.device == "cuda";
  const bool big = o.model == "3b" || o.model == "7b";
  if (o.peer_modes.empty()) o.peer_modes = big ? "" : "eager";
  if (big && o.threads == 2) o.threads = std::max(2, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  if (o.dtype.empty()) o.dtype = gpu ? "bf16" : "fp32";
  if (o.peak_tflops <= 0 && gpu) o.peak_tflops = 989;
  if (nps.empty()) nps = gpu ? "1" : "1,2";
  for (size_t p = 0; p < nps.size();) {
    size_t q = nps.find(',', p);
    o.nps.push_back(std::atoi(nps.substr(p, q - p).c_str()));
    p = q == std::string::npos ? nps.size() : q + 1;
  }
  if (gpu) o.sets.push_back("runtime.device=cuda");
  // GPU steps take a fraction of a second: 20 of them average out clocks and allocator settling. A
  // CPU step of bench-small takes seconds; there --rounds, not more steps, tames the machine's load.
  if (o.steps <= 0) o.steps = gpu ? 20 : 4;
  if (o.steps < 2) o.steps = 2;
  for (const std::string& s : o.sets)
    if (s.rfind("optimizer.", 0) == 0 || s.rfind("lr_schedule.", 0) == 0) {
      fprintf(stderr,
              "bench-train-throughput: --set %s would apply to wmtp only; use --lr / --weight-decay, which "
              "both sides get\n",
              s.c_str());
      std::exit(2);
    }
  return o;
}

std::string find_python(const std::string& wanted) {
  if (wanted == "none") return "";
  // First the Python whose torch this build's LibTorch came from (WMTP_TORCH_PYTHON), so that the peer
  // runs the same PyTorch as wmtp.
  std::vector<std::string> candidates = {WMTP_TORCH_PYTHON_BENCH, "python3", "/usr/bin/python3"};
  if (!wanted.empty()) candidates = {wanted};
  for (const std::string& p : candidates)
    if (!p.empty() && sh(p + " -c 'import torch' > /dev/null 2>&1") == 0) return p;
  return "";
}

// Throughput over the timed steps (step 1 warms up): their tokens over their time, as the peer counts.
Figures read_metrics(const std::string& path, bool gpu) {
  Figures f;
  std::istringstream in(slurp(path));
  std::string line;
  int n = 0;
  double tokens = 0;
  std::map<std::string, double> phase_sum;
  std::vector<std::string> phase_order;
  while (std::getline(in, line)) {
    auto v = wmtp::json::parse(line);
    if (!v.find("train/loss") || v.at("step").as_int() < 2) continue;  // step 1 warms up
    const double t = v.at("perf/step_time_sec").as_double();
    tokens += v.at("perf/tokens_per_sec").as_double() * t;
    f.step_time += t;
    // GPU: the caching allocator's peak where the trainer reports one (a key with "gpu" and "peak").
    double peak = v.at("system/rss_peak_max_gib").as_double();
    f.host_peak_gib = std::max(f.host_peak_gib, peak);
    for (const auto& kv : v.as_object()) {
      if (gpu && kv.first.find("gpu") != std::string::npos && kv.first.find("peak_allocated") != std::string::npos)
        peak = kv.second.as_double();
      if (kv.first.rfind("perf/phase_", 0) == 0 && kv.second.is_number()) {
        if (!phase_sum.count(kv.first)) phase_order.push_back(kv.first);
        phase_sum[kv.first] += kv.second.as_double();
      }
    }
    f.peak_gib = std::max(f.peak_gib, peak);
    ++n;
  }
  if (n) f.tokens_per_sec = tokens / f.step_time, f.step_time /= n, f.ok = true;
  for (const std::string& k : phase_order) f.phases_ms.emplace_back(k.substr(11, k.size() - 11 - 3), phase_sum[k] / n);
  return f;
}

// Where wmtp's step goes: each phase's milliseconds per step and its share of the step.
void print_phases(const Figures& f) {
  double step = 0;
  for (const auto& [name, ms] : f.phases_ms)
    if (name == "step") step = ms;
  if (f.phases_ms.empty() || step <= 0) return;
  printf(
      "  wmtp np 1 step, by phase (ms per step, mean of the timed steps; waits and host syncs lie inside the "
      "phases):\n");
  for (const auto& [name, ms] : f.phases_ms) printf("    %-22s %10.2f %7.1f %%\n", name.c_str(), ms, 100.0 * ms / step);
}

double dry_run_total_gib(const std::string& log) {
  std::istringstream in(slurp(log));
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("  total ") == std::string::npos) continue;
    double v = 0;
    char unit[8] = {0};
    if (sscanf(line.c_str() + line.find_first_of("0123456789"), "%lf %7s", &v, unit) == 2)
      return std::string(unit) == "GiB" ? v : std::string(unit) == "MiB" ? v / 1024 : v / (1 << 20);
  }
  return 0;
}

// The first `n` micro-batches of the dataset, collated as the trainer does, as raw int64
// [n, 2, B, S] (tokens, labels) for the peer.
bool write_batches(const std::string& h5, const std::string& out, const ModelShape& m, int n) {
  wmtp::Dataset ds = wmtp::Dataset::open(h5);
  wmtp::DataConfig dc;
  dc.max_length = m.seq;
  dc.pad_to = wmtp::PadTo::MaxLength;
  wmtp::CollateOptions co = wmtp::CollateOptions::from(dc, ds.header());
  std::ofstream f(out, std::ios::binary);
  const int64_t rows = static_cast<int64_t>(ds.samples().size());
  for (int i = 0; i < n; ++i) {
    std::vector<wmtp::DataItem> items;
    for (int64_t b = 0; b < m.micro; ++b) items.push_back(wmtp::DataItem{(i * m.micro + b) % rows, -1, -1});
    wmtp::Batch batch = wmtp::load_batch(ds, items, co);
    for (const at::Tensor& t : {batch.tokens, batch.labels}) {
      at::Tensor c = t.to(at::kLong).contiguous();
      f.write(reinterpret_cast<const char*>(c.data_ptr<int64_t>()), static_cast<std::streamsize>(c.numel() * 8));
    }
  }
  return static_cast<bool>(f);
}

wmtp::ModelArgs model_args(const ModelShape& m) {
  wmtp::ModelArgs a;
  a.dim = m.dim, a.n_layers = m.layers, a.n_heads = m.heads, a.n_kv_heads = m.heads, a.vocab_size = m.vocab;
  a.n_future_tokens = m.n_future, a.max_seq_len = m.seq, a.multiple_of = 256;
  return a;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  snprintf(buf, sizeof(buf), f, x);
  return buf;
}

// train-rho1 against train-baseline at np 1 (2 threads), same model, data and steps; the reference
// is bench-small's trunk with one head (n_layers 5, n_future 1), made by a 1-step train-baseline.
int compare_pipelines(const std::string& dir, const std::string& bin, const std::string& mpirun,
                      const std::string& model, int repeat) {
  const std::string base_cfg = " -c " + g_src + "/configs/tiny.toml" + model + " --set training.global_batch_size=4";
  const std::string ref_dir = dir + "/ref";
  if (sh(bin + "/train-baseline" + base_cfg +
         " --set model.n_layers=5 --set model.n_future_tokens=1"
         " --set training.max_steps=1 --set checkpoint.save_final=true --set checkpoint.dir=" +
         ref_dir + "/ckpt --set training.run_dir=" + ref_dir + " > " + ref_dir + ".log 2>&1")) {
    fprintf(stderr, "bench: making the reference failed, see %s.log\n", ref_dir.c_str());
    return 1;
  }
  printf("\npipelines at np 1 (step time, step 1 excluded); rho1: scope global, reference = trunk + 1 head\n");
  printf("%8s %14s %14s %10s\n", "repeat", "baseline s", "rho1 s", "ratio");
  for (int r = 0; r < repeat; ++r) {
    double t[2] = {0, 0};
    for (int p = 0; p < 2; ++p) {
      const std::string prog = p ? "train-rho1" : "train-baseline";
      const std::string run = dir + "/" + prog + "_" + std::to_string(r);
      std::string cfg = base_cfg + " --set training.run_dir=" + run + " --set checkpoint.dir=" + run + "/ckpt";
      if (p)
        cfg = " -c " + g_src + "/configs/tiny-rho1.toml" + model + " --set training.global_batch_size=4" +
              " --set training.run_dir=" + run + " --set checkpoint.dir=" + run +
              "/ckpt --set rho1.reference=" + ref_dir + "/ckpt";
      if (sh("OMP_NUM_THREADS=2 " + mpirun + " -x OMP_NUM_THREADS -np 1 " + bin + "/" + prog + cfg + " > " + run +
             ".log 2>&1")) {
        fprintf(stderr, "bench: %s failed, see %s.log\n", prog.c_str(), run.c_str());
        return 1;
      }
      t[p] = read_metrics(run + "/metrics.jsonl", false).step_time;
    }
    printf("%8d %14.2f %14.2f %10.2f\n", r + 1, t[0], t[1], t[0] > 0 ? t[1] / t[0] : 0.0);
  }
  return 0;
}

}  // namespace

int run_peer(const Options& o, const ModelShape& m, const std::string& dir, const std::string& python,
             const Figures& ours1, const std::function<double(double)>& mfu,
             std::map<std::string, std::vector<double>>& ratios);

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const bool gpu = o.device == "cuda";
  ModelShape m = o.model == "1b"   ? ModelShape{2048, 16, 16, 32000, 2048}
                 : o.model == "3b" ? ModelShape{3072, 28, 24, 32000, 2048, 1}
                 : o.model == "7b" ? ModelShape{4096, 32, 32, 32000, 2048, 1}
                                   : ModelShape{512, 8, 8, 32000, 512};
  const std::string dir = "bench-train";
  const std::string bin = WMTP_BIN_DIR_BENCH;
  sh("rm -rf " + dir + " && mkdir -p " + dir);
  // Long samples: a short prompt and a solution of about seq tokens with the tiny tokenizer.
  {
    std::ofstream out(dir + "/long.jsonl");
    const int64_t lines = m.seq / 8;
    for (int i = 0; i < 64; ++i) {
      std::string body;
      for (int64_t j = 0; j < lines; ++j)
        body += "    total = total + values[" + std::to_string((i + j) % 17) + "] * 3\\n";
      for (int c = 0; c < 2; ++c)
        out << "{\"instruction\": \"Sum the list, problem " << i
            << ".\", \"input\": \"\", \"output\": \"def f(values):\\n    total = 0\\n"
            << body << "    return total\\n\", \"task_id\": \"p" << i << (c ? "_incorrect_0" : "_correct_0")
            << "\", \"is_correct\": " << (c ? "false" : "true") << ", \"metadata\": {\"difficulty\": 3}}\n";
    }
  }
  // --bind-to none: Open MPI binds a rank to one core when np <= 2, so np 1 with 2 threads would
  // run both on core 0 while the peer (no mpirun) has the machine (sbatch/train.sbatch does the same).
  std::string mpirun = "mpirun --oversubscribe --bind-to none" +
                       std::string(getuid() == 0 ? " --allow-run-as-root" : "");
  const std::string seq = std::to_string(m.seq);
  if (sh(g_src + "/data/make_tokenizer.sh " + dir + "/tok > " + dir + "/tok.log 2>&1") ||
      sh(bin + "/preprocess-metadata --input " + dir + "/long.jsonl --tokenizer " + dir + "/tok.model --output " + dir +
         "/long.h5 --max-length " + seq + " --on-overlength truncate > " + dir + "/prep.log 2>&1")) {
    fprintf(stderr, "bench: data preparation failed (see %s)\n", dir.c_str());
    return 1;
  }
  std::string model =
      " --set model.dim=" + std::to_string(m.dim) + " --set model.n_layers=" + std::to_string(m.layers) +
      " --set model.n_heads=" + std::to_string(m.heads) + " --set model.n_kv_heads=" + std::to_string(m.heads) +
      " --set model.n_future_tokens=4 --set model.vocab_size=32000 --set model.max_seq_len=" + seq +
      " --set model.multiple_of=256 --set lora.enabled=false --set data.train=" + dir +
      "/long.h5 --set data.valid= --set data.max_length=" + seq +
      " --set data.pad_to=max_length --set training.micro_batch_size=" + std::to_string(m.micro) +
      " --set training.max_steps=" + std::to_string(o.steps + 1) +
      " --set checkpoint.every=0 --set checkpoint.save_final=false --set checkpoint.resume=never"
      " --set logging.log_interval=1 --set sharding.param_dtype=" +
      o.dtype + " --set model.activation_checkpointing=" + (o.model == "3b" || o.model == "7b" ? "true" : "false") +
      (o.model == "7b" ? " --set sharding.offload=optimizer" : "") +
      // the peer's optimizer: AdamW, betas (0.9, 0.95), eps 1e-8, clip 1.0, constant lr
      " --set optimizer.lr=" + fmt("%g", o.lr) + " --set optimizer.weight_decay=" + fmt("%g", o.weight_decay) +
      " --set optimizer.max_grad_norm=1.0 --set lr_schedule.type=constant";
  for (const std::string& s : o.sets) model += " --set " + s;
  const wmtp::ModelArgs args = model_args(m);
  const int64_t params = wmtp::model_param_count(args);
  const double flops_per_token = wmtp::train_flops_per_token(args);
  printf(
      "%s: dim %lld, %lld layers, %lld heads, n_future 4, vocab 32000, seq %lld, micro-batch %lld (%.1fM params), %s, "
      "full fine-tuning, full_shard, %s\n",
      o.model == "small" ? "bench-small" : (o.model + " MTP").c_str(), (long long)m.dim, (long long)m.layers,
      (long long)m.heads, (long long)m.seq, (long long)m.micro, params / 1e6, o.dtype.c_str(), o.device.c_str());
  printf(
      "both sides: AdamW lr %g from step 1 (constant), betas (0.9, 0.95), eps 1e-8, weight decay %g, clip 1.0; "
      "%d timed steps after 1 warm-up; MFU = %.3g GFLOP/token (6 x params, train/flops.h) x tokens/s / %g TFLOP/s\n",
      o.lr, o.weight_decay, o.steps, flops_per_token / 1e9, o.peak_tflops);
  printf("%-26s %12s %10s %8s %14s %14s %8s%s\n", "run", "tokens/s", "step s", "MFU %",
         gpu ? "peak GiB" : "peak RSS GiB", "dry-run GiB", "ratio", gpu ? "   host GiB" : "");
  const std::function<double(double)> mfu = [&](double tps) {
    return o.peak_tflops > 0 ? 100.0 * flops_per_token * tps / (o.peak_tflops * 1e12) : 0.0;
  };
  const std::string python = find_python(o.python);
  std::map<std::string, std::vector<double>> ratios;  // peer mode -> wmtp np 1 / peer, one per round
  for (int round = 1; round <= o.rounds; ++round) {
    if (o.rounds > 1) printf("round %d of %d\n", round, o.rounds);
    Figures ours1;
    for (int np : o.nps) {
      std::string run = dir + "/np" + std::to_string(np) + (o.rounds > 1 ? "_r" + std::to_string(round) : "");
      std::string gb = " --set training.global_batch_size=" + std::to_string(m.micro * np);
      std::string cfg = " -c " + g_src + "/configs/tiny.toml" + model + gb + " --set training.run_dir=" + run +
                        " --set checkpoint.dir=" + run + "/ckpt";
      sh(bin + "/train-baseline" + cfg + " --dry-run --world-size " + std::to_string(np) + " > " + run + ".dry 2>&1");
      const int threads = gpu ? o.threads : std::max(1, o.threads / np);
      int rc = sh("OMP_NUM_THREADS=" + std::to_string(threads) + " " + mpirun + " -x OMP_NUM_THREADS -np " +
                  std::to_string(np) + " " + bin + "/train-baseline" + cfg + " > " + run + ".log 2>&1");
      if (rc) {
        fprintf(stderr, "bench: np %d failed (exit %d), see %s.log\n", np, rc, run.c_str());
        continue;
      }
      Figures f = read_metrics(run + "/metrics.jsonl", gpu);
      f.mfu = mfu(f.tokens_per_sec);
      if (np == 1) ours1 = f;
      double est = dry_run_total_gib(run + ".dry");
      printf("%-26s %12.1f %10.3f %8.2f %14.2f %14.2f %8.2f", ("wmtp train-baseline np " + std::to_string(np)).c_str(),
             f.tokens_per_sec, f.step_time, f.mfu, f.peak_gib, est, f.peak_gib > 0 ? est / f.peak_gib : 0.0);
      if (gpu) printf(" %10.2f", f.host_peak_gib);
      printf("\n");
      if (np == 1 && round == o.rounds) print_phases(f);
      fflush(stdout);
    }

    if (python.empty())
      printf(
          "peer: skipped (no python with torch: make bench builds against .venv-torch, whose python it uses; or "
          "--python PATH)\n");
    else if (int rc = run_peer(o, m, dir, python, ours1, mfu, ratios))
      return rc;
  }
  if (o.rounds > 1)
    for (auto& [mode, r] : ratios) {
      std::sort(r.begin(), r.end());
      printf("wmtp np 1 / peer %s over %zu rounds: min %.2fx, median %.2fx, max %.2fx\n", mode.c_str(), r.size(),
             r.front(), r[r.size() / 2], r.back());
    }
  if (o.profile_steps > 0) {
    // Apart from the timed runs: recording every operator (and kernel) slows the step down.
    const std::string run = dir + "/profile";
    const std::string cfg = " -c " + g_src + "/configs/tiny.toml" + model + " --set training.global_batch_size=4" +
                            " --set training.run_dir=" + run + " --set checkpoint.dir=" + run + "/ckpt" +
                            " --set training.max_steps=" + std::to_string(3 + o.profile_steps) +
                            " --set logging.profile_warmup=3 --set logging.profile_steps=" +
                            std::to_string(o.profile_steps);
    const int rc = sh("OMP_NUM_THREADS=" + std::to_string(o.threads) + " " + mpirun + " -x OMP_NUM_THREADS -np 1 " +
                      bin + "/train-baseline" + cfg + " > " + run + ".log 2>&1");
    if (rc) printf("profile: wmtp np 1 failed (exit %d), see %s.log\n", rc, run.c_str());
    else
      printf("profile: a LibTorch trace of wmtp np 1 steps 4-%d in %s/trace_rank0.json (ui.perfetto.dev)\n",
             3 + o.profile_steps, run.c_str());
  }
  if (gpu || o.repeat <= 0) return 0;
  return compare_pipelines(dir, bin, mpirun, model, o.repeat);
}

// The peer in each mode on the first batches of the same dataset.
int run_peer(const Options& o, const ModelShape& m, const std::string& dir, const std::string& python,
             const Figures& ours1, const std::function<double(double)>& mfu,
             std::map<std::string, std::vector<double>>& ratios) {
  const std::string seq = std::to_string(m.seq);
  const std::string batches = dir + "/batches.bin";
  if (!write_batches(dir + "/long.h5", batches, m, 4)) {
    fprintf(stderr, "bench: could not write %s\n", batches.c_str());
    return 1;
  }
  std::string modes = o.peer_modes + ",";
  for (size_t p = 0, q; (q = modes.find(',', p)) != std::string::npos; p = q + 1) {
    const std::string mode = modes.substr(p, q - p);
    if (mode.empty()) continue;
    const std::string log = dir + "/peer_" + mode + ".log";
    const int threads = o.threads;
    std::string cmd = "OMP_NUM_THREADS=" + std::to_string(threads) + " " + python + " " + g_src +
                      "/bench/python/mtp_peer.py --mode " + mode + " --device " + o.device + " --dtype " + o.dtype +
                      " --dim " + std::to_string(m.dim) + " --n-layers " + std::to_string(m.layers) + " --n-heads " +
                      std::to_string(m.heads) + " --vocab 32000 --n-future 4 --seq " + seq +
                      " --batch 4 --batch-file " + batches + " --steps " + std::to_string(o.steps) +
                      " --warmup 1 --threads " + std::to_string(threads) + " --lr " + fmt("%g", o.lr) +
                      " --weight-decay " + fmt("%g", o.weight_decay) +
                      (o.profile_steps > 0 ? " --profile-table 15" : "") + " > " + log + " 2>&1";
    const int rc = sh(cmd);
    std::string out = slurp(log);
    size_t at = out.rfind("PEER ");
    if (rc || at == std::string::npos) {
      printf("%-26s failed (exit %d), see %s\n", ("peer " + mode).c_str(), rc, log.c_str());
      continue;
    }
    auto v = wmtp::json::parse(out.substr(at + 5, out.find('\n', at) - at - 5));
    const double tps = v.at("tokens_per_sec").as_double();
    printf("%-26s %12.1f %10.3f %8.2f %14.2f %14s %8s\n",
           ("peer " + mode + " (torch " + v.at("torch").as_string() + ")").c_str(), tps,
           v.at("step_time_sec").as_double(), mfu(tps), v.at("peak_memory_gib").as_double(), "", "");
    if (const auto* c = v.find("config")) printf("  peer %s: %s\n", mode.c_str(), c->as_string().c_str());
    if (o.profile_steps > 0)
      printf("  peer %s: one step by operator (torch.profiler) in %s\n", mode.c_str(), log.c_str());
    if (mode == "fsdp2") {
      printf("  (no ratio against fsdp2: it runs a foreach AdamW and no compile; shown for reference)\n");
    } else if (ours1.ok) {
      printf("%-26s %12.2fx\n", ("  wmtp np 1 / peer " + mode).c_str(), ours1.tokens_per_sec / tps);
      ratios[mode].push_back(ours1.tokens_per_sec / tps);
    }
    fflush(stdout);
  }
  return 0;
}
