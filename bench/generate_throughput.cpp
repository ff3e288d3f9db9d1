// bench-generate-throughput: wmtp's greedy decoding (eval/decoder.h, the code bin/generate runs)
// against a plain-PyTorch KV-cache greedy loop (bench/python/generate_peer.py) on the same weights
// and prompts, side by side in one run: new tokens per second and the ratio (both batch 1; wmtp's
// batch of 8 is printed beside). Then the same prompts with self-speculative decoding (--speculative K, heads 1..K-1 draft): tokens per forward, draft
// acceptance per head and the speed-up over plain decoding. Asserts nothing.
//
// The model should have trained heads for the speculative figures to mean anything: by default the
// model the demo evaluates (runs/tiny/full220/checkpoints/<latest>, `make demo` makes it) with the
// demo's tokenizer; the prompts are the Alpaca prompts of the bundled tasks (data/tiny/
// tasks_mbpp.jsonl). Every side stops at EOS, as bin/evaluate does, or after --max-new-tokens; greedy
// decoding gives both sides the same tokens, so the bench reports whether both produced the same ids.
// --ignore-eos decodes exactly --max-new-tokens tokens per prompt instead: what follows a trained
// model's EOS is text it never saw, where the heads agree less, so that understates speculative decoding.
// The peer reads a Meta-named fp32 safetensors export of the checkpoint (bin/convert-checkpoint).
//
// Run from the repository root, after `make bench` and `make demo`:
//   OMP_NUM_THREADS=1 build-torch2/bench/bench-generate-throughput [--checkpoint CKPT.h5]
//     [--tokenizer build/tiny/tokenizer.model] [--tasks data/tiny/tasks_mbpp.jsonl] [--max-new-tokens 128]
//     [--speculative K (default n_future)] [--threads 1] [--python PATH|none] [--ignore-eos]
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/tokenizer.h"
#include "eval/benchmarks.h"
#include "eval/decoder.h"
#include "eval/load_model.h"

namespace fs = std::filesystem;

namespace {

const std::string g_src = WMTP_SOURCE_DIR_BENCH;
const std::string g_bin = WMTP_BIN_DIR_BENCH;

struct Options {
  std::string checkpoint, tokenizer = "build/tiny/tokenizer.model", tasks = "data/tiny/tasks_mbpp.jsonl", python;
  int64_t max_new_tokens = 128, speculative = 0, threads = 1;
  bool eos = true;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "bench-generate-throughput: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--checkpoint") o.checkpoint = next();
    else if (a == "--tokenizer") o.tokenizer = next();
    else if (a == "--tasks") o.tasks = next();
    else if (a == "--max-new-tokens") o.max_new_tokens = std::stoll(next());
    else if (a == "--speculative") o.speculative = std::stoll(next());
    else if (a == "--threads") o.threads = std::stoll(next());
    else if (a == "--python") o.python = next();
    else if (a == "--ignore-eos") o.eos = false;
    else {
      fprintf(stderr, "usage: bench-generate-throughput [--checkpoint CKPT.h5] [--tokenizer T.model] [--tasks MBPP.jsonl] "
                      "[--max-new-tokens N] [--speculative K] [--threads T] [--python PATH|none] [--ignore-eos]\n");
      std::exit(2);
    }
  }
  return o;
}

int shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The newest checkpoint of the model the demo evaluates ("" when the demo has not run).
std::string demo_checkpoint() {
  const fs::path dir = "runs/tiny/full220/checkpoints";
  std::string latest = read_all((dir / "latest").string());
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  return latest.empty() ? "" : (dir / latest).string();
}

// The Python whose torch this build's LibTorch came from first (the peer then runs the same PyTorch).
std::string torch_python(const std::string& wanted) {
  if (wanted == "none") return "";
  std::vector<std::string> candidates = {WMTP_TORCH_PYTHON_BENCH, "python3"};
  if (!wanted.empty()) candidates = {wanted};
  for (const std::string& p : candidates)
    if (!p.empty() && shell(p + " -c 'import torch, safetensors' > /dev/null 2>&1") == 0) return p;
  return "";
}

struct Run {
  double seconds = 0.0, cpu_seconds = 0.0;  // wall time; CPU time of the process (steadier on a shared machine)
  wmtp::DecodeStats stats;
  std::vector<std::vector<int64_t>> tokens;
  double tokens_per_sec() const { return static_cast<double>(stats.tokens) / seconds; }
};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Greedy decoding of every prompt, max_new_tokens each (eos_id -1: exactly that many); the first prompt once
// untimed.
Run decode_all(const wmtp::GenerationModel& gm, const std::vector<std::vector<int64_t>>& prompts, int64_t n_new,
               int64_t eos_id, int64_t speculative) {
  wmtp::DecodeOptions d;
  d.max_new_tokens = n_new;
  d.eos_id = eos_id;
  d.speculative = speculative;
  d.dtype = gm.dtype;
  d.device = gm.device;
  wmtp::TokenRng rng(0);  // greedy: never drawn from
  wmtp::decode_sequence(*gm.model, *gm.params, prompts.front(), d, rng);
  Run r;
  r.stats.drafted.assign(static_cast<size_t>(speculative - 1), 0);
  r.stats.accepted = r.stats.drafted;
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = process_cpu_seconds();
  for (const auto& p : prompts) r.tokens.push_back(wmtp::decode_sequence(*gm.model, *gm.params, p, d, rng, nullptr, &r.stats).tokens);
  r.cpu_seconds = process_cpu_seconds() - c0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// decode_all with decode_batch, `batch` prompts at a time (plain greedy; left-padded).
Run decode_batched(const wmtp::GenerationModel& gm, const std::vector<std::vector<int64_t>>& prompts, int64_t n_new,
                   int64_t eos_id, size_t batch) {
  wmtp::DecodeOptions d;
  d.max_new_tokens = n_new;
  d.eos_id = eos_id;
  d.dtype = gm.dtype;
  d.device = gm.device;
  Run r;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t first = 0; first < prompts.size(); first += batch) {
    const std::vector<std::vector<int64_t>> sub(prompts.begin() + static_cast<long>(first),
                                                prompts.begin() + static_cast<long>(std::min(first + batch, prompts.size())));
    std::vector<wmtp::TokenRng> rngs(sub.size(), wmtp::TokenRng(0));
    for (auto& res : wmtp::decode_batch(*gm.model, *gm.params, sub, d, rngs, {}, &r.stats)) r.tokens.push_back(res.tokens);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (o.checkpoint.empty()) o.checkpoint = demo_checkpoint();
    if (o.checkpoint.empty() || !fs::exists(o.checkpoint)) {
      fprintf(stderr, "bench-generate-throughput: no checkpoint (run `make demo` first for runs/tiny/full220, or --checkpoint)\n");
      return 2;
    }
    at::set_num_threads(static_cast<int>(o.threads));
    wmtp::GenerationModel gm = wmtp::load_generation_model(o.checkpoint, "", "fp32", "cpu");
    const wmtp::Tokenizer tok = wmtp::Tokenizer::load(o.tokenizer);
    std::vector<std::vector<int64_t>> prompts;
    for (const wmtp::BenchTask& t : wmtp::load_benchmark("mbpp", o.tasks, 0)) {
      std::vector<int64_t> ids{tok.bos_id()};
      for (int32_t id : tok.encode(t.prompt)) ids.push_back(id);
      prompts.push_back(std::move(ids));
    }
    const int64_t K = o.speculative > 0 ? o.speculative : gm.model->n_future();
    const int64_t eos = o.eos ? tok.eos_id() : -1;
    printf("model %s (%lld heads), %zu prompts, %lld new tokens each%s, greedy fp32 CPU, %lld thread(s)\n",
           o.checkpoint.c_str(), static_cast<long long>(gm.model->n_future()), prompts.size(),
           static_cast<long long>(o.max_new_tokens), o.eos ? " at most (stop at EOS)" : " (EOS ignored)",
           static_cast<long long>(o.threads));

    const Run plain = decode_all(gm, prompts, o.max_new_tokens, eos, 1);
    printf("%-34s %10.1f tokens/s  (%.3f s)\n", "wmtp plain (KV cache)", plain.tokens_per_sec(), plain.seconds);

    const Run batched = decode_batched(gm, prompts, o.max_new_tokens, eos, 8);
    size_t same_b = 0;
    for (size_t i = 0; i < prompts.size(); ++i) same_b += batched.tokens[i] == plain.tokens[i] ? 1 : 0;
    printf("%-34s %10.1f tokens/s  (%.3f s; %.2fx batch 1; same ids for %zu of %zu prompts)\n",
           "wmtp plain, --batch-size 8", batched.tokens_per_sec(), batched.seconds, plain.seconds / batched.seconds,
           same_b, prompts.size());

    const std::string python = torch_python(o.python);
    if (python.empty()) {
      printf("peer: skipped (no python with torch and safetensors: make bench builds against .venv-torch; or --python PATH)\n");
    } else {
      const fs::path dir = fs::temp_directory_path() / ("wmtp-bench-generate-" + std::to_string(::getpid()));
      fs::create_directories(dir);
      wmtp::json::Value list = wmtp::json::Value::array();
      for (const auto& p : prompts) {
        wmtp::json::Value ids = wmtp::json::Value::array();
        for (int64_t t : p) ids.push(t);
        list.push(std::move(ids));
      }
      std::ofstream((dir / "prompts.json").string()) << wmtp::json::dump(list);
      const std::string exp = g_bin + "/convert-checkpoint export --input '" + o.checkpoint + "' --output '" +
                              (dir / "model").string() + "' --names meta --dtype fp32 > " + (dir / "export.log").string() + " 2>&1";
      const std::string peer = "OMP_NUM_THREADS=" + std::to_string(o.threads) + " " + python + " " + g_src +
                               "/bench/python/generate_peer.py --model '" + (dir / "model").string() + "' --prompts '" +
                               (dir / "prompts.json").string() + "' --max-new-tokens " + std::to_string(o.max_new_tokens) +
                               " --threads " + std::to_string(o.threads) + " --eos-id " + std::to_string(eos) + " > " + (dir / "peer.out").string() + " 2>&1";
      if (shell(exp) != 0) {
        printf("peer: the export failed:\n%s", read_all((dir / "export.log").string()).c_str());
      } else if (shell(peer) != 0) {
        printf("peer: failed:\n%s", read_all((dir / "peer.out").string()).c_str());
      } else {
        std::istringstream out(read_all((dir / "peer.out").string()));
        std::string line;
        while (std::getline(out, line))
          if (line.rfind("PEER ", 0) == 0) break;
        const wmtp::json::Value v = wmtp::json::parse(line.substr(5));
        const double peer_tps = v.at("tokens_per_sec").as_double();
        size_t same = 0;
        const auto& ptoks = v.at("tokens").as_array();
        for (size_t i = 0; i < ptoks.size() && i < plain.tokens.size(); ++i) {
          std::vector<int64_t> ids;
          for (const auto& t : ptoks[i].as_array()) ids.push_back(t.as_int());
          same += ids == plain.tokens[i] ? 1 : 0;
        }
        printf("%-34s %10.1f tokens/s  (%.3f s)\n", "PyTorch peer (KV cache)", peer_tps, v.at("seconds").as_double());
        printf("  peer: %s\n", v.at("config").as_string().c_str());
        printf("ratio wmtp / peer (plain greedy): %.2fx; same generated ids for %zu of %zu prompts\n",
               plain.tokens_per_sec() / peer_tps, same, prompts.size());
      }
      fs::remove_all(dir);
    }

    if (K >= 2) {
      const Run spec = decode_all(gm, prompts, o.max_new_tokens, eos, K);
      size_t same = 0;
      for (size_t i = 0; i < prompts.size(); ++i) same += spec.tokens[i] == plain.tokens[i] ? 1 : 0;
      printf("%-34s %10.1f tokens/s  (%.3f s)\n", ("wmtp --speculative " + std::to_string(K)).c_str(),
             spec.tokens_per_sec(), spec.seconds);
      printf("  %.3f tokens per forward (plain: %.3f); acceptance per head:",
             static_cast<double>(spec.stats.tokens) / static_cast<double>(spec.stats.forwards),
             static_cast<double>(plain.stats.tokens) / static_cast<double>(plain.stats.forwards));
      for (size_t k = 0; k < spec.stats.drafted.size(); ++k)
        printf(" %zu: %.3f", k + 1,
               spec.stats.drafted[k] ? static_cast<double>(spec.stats.accepted[k]) / static_cast<double>(spec.stats.drafted[k]) : 0.0);
      // The speed-up is tokens per forward over what a speculative forward costs in plain forwards: it runs
      // every head's block (plain: trunk + head 0) and unembeds the drafts.
      const double plain_ms = 1e3 * plain.cpu_seconds / static_cast<double>(plain.stats.forwards);
      const double spec_ms = 1e3 * spec.cpu_seconds / static_cast<double>(spec.stats.forwards);
      printf("\n  %.3f CPU ms per forward (plain: %.3f ms, so one speculative forward costs %.2f plain ones)", spec_ms,
             plain_ms, spec_ms / plain_ms);
      printf("\nspeculative speed-up over plain: %.2fx wall time, %.2fx CPU time; same ids as plain for %zu of %zu prompts\n",
             plain.seconds / spec.seconds, plain.cpu_seconds / spec.cpu_seconds, same, prompts.size());
    }
    return 0;
  } catch (const std::exception& e) {
    fprintf(stderr, "bench-generate-throughput: %s\n", e.what());
    return 1;
  }
}
