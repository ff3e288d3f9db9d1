// bench-model-step: one MTP training step (forward + backward, no optimizer) of the `bench-small`
// model in one process, sequential unembedding vs all heads at once, measured side by side
// (alternating steps). Prints tokens/s of each and the step-time ratio sequential / all-heads.
// bench-small: dim 512, 8 layers (4 trunk + 4 heads), 8 heads, n_future 4, vocab 32000, seq 512,
// batch 4, bf16 compute over fp32 masters (LocalParams with a compute dtype).
// Usage: bench-model-step [--steps N] [--warmup N] [--dtype bf16|fp32] [--batch B] [--seq S]
//                         [--checkpointing 0|1] [--threads T]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "model/local_params.h"
#include "model/mtp.h"
#include "model/mtp_loss.h"
#include "model/mtp_pass.h"

namespace {

struct Options {
  int steps = 3, warmup = 1, threads = 0;
  std::string dtype = "bf16";
  int64_t batch = 4, seq = 512;
  bool checkpointing = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") o.steps = std::stoi(next());
    else if (a == "--warmup")
      o.warmup = std::stoi(next());
    else if (a == "--dtype")
      o.dtype = next();
    else if (a == "--batch")
      o.batch = std::stoll(next());
    else if (a == "--seq")
      o.seq = std::stoll(next());
    else if (a == "--checkpointing")
      o.checkpointing = next() == "1";
    else if (a == "--threads")
      o.threads = std::stoi(next());
    else {
      std::fprintf(stderr,
                   "usage: bench-model-step [--steps N] [--warmup N] [--dtype bf16|fp32] [--batch B] "
                   "[--seq S] [--checkpointing 0|1] [--threads T]\n");
      std::exit(2);
    }
  }
  if (o.dtype != "bf16" && o.dtype != "fp32") {
    std::fprintf(stderr, "--dtype must be bf16 or fp32\n");
    std::exit(2);
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.threads > 0) at::set_num_threads(o.threads);

  wmtp::ModelArgs args;
  args.dim = 512;
  args.n_layers = 8;
  args.n_heads = 8;
  args.n_kv_heads = 8;
  args.vocab_size = 32000;
  args.multiple_of = 256;
  args.n_future_tokens = 4;
  args.max_seq_len = std::max<int64_t>(512, o.seq);
  wmtp::MtpModel model(args);
  const auto compute = o.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  wmtp::LocalParams src(model.param_specs(), model.init_params(1), compute);

  wmtp::MtpBatch batch;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  batch.tokens = at::randint(args.vocab_size, {o.batch, o.seq}, gen, at::TensorOptions().dtype(at::kLong));
  batch.labels = batch.tokens.clone();
  batch.labels.narrow(1, 0, o.seq / 4).fill_(-100);  // a prompt
  auto ci = wmtp::count_valid_targets(batch.labels, args.n_future_tokens);
  std::vector<double> counts(ci.begin(), ci.end());

  int64_t n_params = 0;
  for (const auto& s : model.param_specs()) n_params += s.numel();
  std::printf("bench-model-step: dim %lld, layers %lld (%lld trunk + %lld heads), vocab %lld, params %.1fM\n",
              (long long)args.dim, (long long)args.n_layers, (long long)args.n_trunk_blocks(),
              (long long)args.n_future_tokens, (long long)args.vocab_size, n_params / 1e6);
  std::printf("  batch %lld x seq %lld, compute %s (fp32 masters), activation checkpointing %s, %d threads\n",
              (long long)o.batch, (long long)o.seq, o.dtype.c_str(), o.checkpointing ? "on" : "off",
              at::get_num_threads());

  const char* names[2] = {"all-heads", "sequential"};
  std::vector<double> times[2];
  double losses[2] = {0, 0};
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    for (int mode = 0; mode < 2; ++mode) {  // alternate so both see the same machine state
      wmtp::MtpPassOptions opt;
      opt.sequential_unembedding = mode == 1;
      opt.activation_checkpointing = o.checkpointing;
      src.zero_grad();
      auto t0 = std::chrono::steady_clock::now();
      losses[mode] = wmtp::mtp_forward_backward(model, src, batch, counts, opt).loss;
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (step >= o.warmup) times[mode].push_back(dt);
      std::printf("  step %d %-10s %.3f s  loss %.4f%s\n", step, names[mode], dt, losses[mode],
                  step < o.warmup ? "  (warm-up)" : "");
      std::fflush(stdout);
    }
  }
  const double tokens = double(o.batch) * double(o.seq);
  double med[2];
  for (int mode = 0; mode < 2; ++mode) {
    med[mode] = median(times[mode]);
    std::printf("%-10s median step %.3f s, %.0f tokens/s\n", names[mode], med[mode], tokens / med[mode]);
  }
  std::printf("ratio sequential / all-heads step time: %.3f (goal <= 1.05); loss difference %.2e\n", med[1] / med[0],
              std::abs(losses[1] - losses[0]));
  return 0;
}
