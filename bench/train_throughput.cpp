// bench-train-throughput: train-baseline on bench-small (dim 512, 8 layers, 8 heads, n_future 4,
// vocab 32000, seq 512, micro-batch 4) at np 1 and np 2: tokens/s, MFU and peak RSS per rank beside
// the --dry-run estimate for the same run (ratio; goal: within 15%). Then the pipelines side by side
// at np 1: train-rho1's step time over train-baseline's on the same model and batches (its step adds
// a frozen next-token reference forward — bench-small's trunk + one head — and a no-grad policy
// forward before the training step), runs interleaved `--repeat` times. Prints figures, asserts nothing.
//
//   make bench && build/bench/bench-train-throughput [--dtype fp32|bf16] [--steps N] [--repeat N]
//
// It writes a JSONL of long synthetic samples (~500 tokens), tokenises it with the tiny bundled
// tokenizer, and launches the real programs from bin/ under mpirun.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"

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

struct RunFigures {
  double tokens_per_sec = 0, mfu = 0, rss_peak_gib = 0, step_time = 0;
};

RunFigures read_metrics(const std::string& path) {
  RunFigures f;
  std::istringstream in(slurp(path));
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto v = wmtp::json::parse(line);
    if (!v.find("train/loss") || v.at("step").as_int() < 2) continue;  // step 1 warms up
    f.tokens_per_sec += v.at("perf/tokens_per_sec").as_double();
    f.mfu += v.at("perf/mfu_pct").as_double();
    f.step_time += v.at("perf/step_time_sec").as_double();
    f.rss_peak_gib = std::max(f.rss_peak_gib, v.at("system/rss_peak_max_gib").as_double());
    ++n;
  }
  if (n) f.tokens_per_sec /= n, f.mfu /= n, f.step_time /= n;
  return f;
}

double dry_run_total_gib(const std::string& log) {
  std::istringstream in(slurp(log));
  std::string line;
  while (std::getline(in, line)) {
    auto pos = line.find("total  ");
    if (line.find("  total ") == std::string::npos || pos == std::string::npos) continue;
    double v = 0;
    char unit[8] = {0};
    if (sscanf(line.c_str() + line.find_first_of("0123456789"), "%lf %7s", &v, unit) == 2)
      return std::string(unit) == "GiB" ? v : std::string(unit) == "MiB" ? v / 1024 : v / (1 << 20);
  }
  return 0;
}

// train-rho1 against train-baseline at np 1 (2 threads), same model, data and steps; the reference
// is bench-small's trunk with one head (n_layers 5, n_future 1), made by a 1-step train-baseline.
int compare_pipelines(const std::string& dir, const std::string& bin, const std::string& mpirun,
                      const std::string& model, int repeat) {
  const std::string base_cfg = " -c " + g_src + "/configs/tiny.toml" + model + " --set training.global_batch_size=4";
  const std::string ref_dir = dir + "/ref";
  if (sh(bin + "/train-baseline" + base_cfg + " --set model.n_layers=5 --set model.n_future_tokens=1"
         " --set training.max_steps=1 --set checkpoint.save_final=true --set checkpoint.dir=" + ref_dir +
         "/ckpt --set training.run_dir=" + ref_dir + " > " + ref_dir + ".log 2>&1")) {
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
      if (p) cfg = " -c " + g_src + "/configs/tiny-rho1.toml" + model + " --set training.global_batch_size=4" +
                   " --set training.run_dir=" + run + " --set checkpoint.dir=" + run + "/ckpt --set rho1.reference=" +
                   ref_dir + "/ckpt";
      if (sh("OMP_NUM_THREADS=2 " + mpirun + " -x OMP_NUM_THREADS -np 1 " + bin + "/" + prog + cfg + " > " + run +
             ".log 2>&1")) {
        fprintf(stderr, "bench: %s failed, see %s.log\n", prog.c_str(), run.c_str());
        return 1;
      }
      t[p] = read_metrics(run + "/metrics.jsonl").step_time;
    }
    printf("%8d %14.2f %14.2f %10.2f\n", r + 1, t[0], t[1], t[0] > 0 ? t[1] / t[0] : 0.0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dtype = "fp32";
  int steps = 4, repeat = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dtype") dtype = argv[i + 1];
    if (a == "--steps") steps = std::atoi(argv[i + 1]);
    if (a == "--repeat") repeat = std::atoi(argv[i + 1]);
  }
  const std::string dir = "bench-train";
  const std::string bin = WMTP_BIN_DIR_BENCH;
  sh("rm -rf " + dir + " && mkdir -p " + dir);
  // Long samples: a prompt and a ~2000-character solution (about 500 tokens with the tiny tokenizer).
  {
    std::ofstream out(dir + "/long.jsonl");
    for (int i = 0; i < 64; ++i) {
      std::string body;
      for (int j = 0; j < 60; ++j) body += "    total = total + values[" + std::to_string((i + j) % 17) + "] * 3\\n";
      for (int c = 0; c < 2; ++c)
        out << "{\"instruction\": \"Sum the list, problem " << i << ".\", \"input\": \"\", \"output\": \"def f(values):\\n    total = 0\\n"
            << body << "    return total\\n\", \"task_id\": \"p" << i << (c ? "_incorrect_0" : "_correct_0")
            << "\", \"is_correct\": " << (c ? "false" : "true")
            << ", \"metadata\": {\"difficulty\": 3}}\n";
    }
  }
  std::string mpirun = "mpirun --oversubscribe" + std::string(getuid() == 0 ? " --allow-run-as-root" : "");
  if (sh(g_src + "/data/make_tokenizer.sh " + dir + "/tok") ||
      sh(bin + "/preprocess-metadata --input " + dir + "/long.jsonl --tokenizer " + dir + "/tok.model --output " + dir +
         "/long.h5 --max-length 512 --on-overlength truncate > " + dir + "/prep.log 2>&1")) {
    fprintf(stderr, "bench: data preparation failed (see %s)\n", dir.c_str());
    return 1;
  }
  const std::string model =
      " --set model.dim=512 --set model.n_layers=8 --set model.n_heads=8 --set model.n_kv_heads=8"
      " --set model.n_future_tokens=4 --set model.vocab_size=32000 --set model.max_seq_len=512 --set model.multiple_of=256"
      " --set lora.enabled=false --set data.train=" + dir + "/long.h5 --set data.valid= --set data.max_length=512"
      " --set data.pad_to=max_length --set training.micro_batch_size=4 --set training.max_steps=" + std::to_string(steps) +
      " --set checkpoint.every=0 --set checkpoint.save_final=false --set checkpoint.resume=never --set logging.log_interval=1"
      " --set sharding.param_dtype=" + dtype + " --set model.activation_checkpointing=false";
  printf("bench-small: dim 512, 8 layers, 8 heads, n_future 4, vocab 32000, seq 512, micro-batch 4, %s compute, full fine-tuning, full_shard\n",
         dtype.c_str());
  printf("%4s %12s %10s %8s %14s %14s %8s\n", "np", "tokens/s", "step s", "MFU %", "peak RSS GiB", "dry-run GiB", "ratio");
  for (int np : {1, 2}) {
    std::string run = dir + "/np" + std::to_string(np);
    std::string gb = " --set training.global_batch_size=" + std::to_string(4 * np);
    std::string cfg = " -c " + g_src + "/configs/tiny.toml" + model + gb + " --set training.run_dir=" + run +
                      " --set checkpoint.dir=" + run + "/ckpt";
    sh(bin + "/train-baseline" + cfg + " --dry-run --world-size " + std::to_string(np) + " > " + run + ".dry 2>&1");
    int rc = sh("OMP_NUM_THREADS=" + std::to_string(2 / np) + " " + mpirun + " -x OMP_NUM_THREADS -np " + std::to_string(np) +
                " " + bin + "/train-baseline" + cfg + " > " + run + ".log 2>&1");
    if (rc) {
      fprintf(stderr, "bench: np %d failed (exit %d), see %s.log\n", np, rc, run.c_str());
      continue;
    }
    RunFigures f = read_metrics(run + "/metrics.jsonl");
    double est = dry_run_total_gib(run + ".dry");
    printf("%4d %12.0f %10.2f %8.1f %14.2f %14.2f %8.2f\n", np, f.tokens_per_sec, f.step_time, f.mfu, f.rss_peak_gib, est,
           f.rss_peak_gib > 0 ? est / f.rss_peak_gib : 0.0);
  }
  return compare_pipelines(dir, bin, mpirun, model, repeat);
}
