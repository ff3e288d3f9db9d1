// bench-generate-throughput: wmtp's decoding (eval/decoder.h, the code bin/generate and bin/evaluate
// run) side by side in one run: plain decoding and self-speculative decoding (--speculative K, heads
// 1..K-1 draft) at batch 1 and 8, and a plain-PyTorch KV-cache greedy loop (bench/python/
// generate_peer.py, batch 1) on the same weights and prompts. Every configuration runs once per
// round, the rounds interleave them, and the table gives medians over the rounds of new tokens per
// second, tokens per forward, draft acceptance per head, the wall time of one forward in plain
// forwards at the same batch size, and the speed-ups; each timed figure is printed with the 1-minute
// load average when it was taken (the machine may be shared). Then acceptance at temperature: tokens
// per forward and acceptance per head at T = 0 (greedy), 0.2 and 0.8 (top-p 0.95) on the same
// prompts, against greedy's. Asserts nothing.
//
// The model should have trained heads for the speculative figures to mean anything: by default the
// bench model bench/train-generate-model.sh trains (runs/bench-generate/model.h5: 28 trunk blocks to one
// block per head, trained until its heads draft >= 3 tokens per forward on held-out prompts), else the model `make demo`
// evaluates (runs/tiny/full220), with the demo's tokenizer; the prompts are the Alpaca prompts of the
// bundled tasks (data/tiny/tasks_mbpp.jsonl). Every side stops at EOS, as bin/evaluate does, or after
// --max-new-tokens; greedy decoding gives every side the same tokens, so the bench reports whether
// they produced the same ids. --ignore-eos decodes exactly --max-new-tokens tokens per prompt. The
// peer reads a Meta-named fp32 safetensors export of the checkpoint (bin/convert-checkpoint).
//
// --random 1b (or small, or bench: the bench model's shape) decodes with random weights of that shape
// instead (no checkpoint, no peer, random prompts; scripts/gpu-check.sh on a GPU): the forward's cost
// is what it measures there, since random heads rarely draft a right token.
//
// Run from the repository root, after `make bench` and bench/train-generate-model.sh:
//   OMP_NUM_THREADS=1 build-torch2/bench/bench-generate-throughput [--checkpoint CKPT.h5]
//     [--tokenizer build/tiny/tokenizer.model] [--tasks data/tiny/tasks_mbpp.jsonl] [--max-new-tokens 128]
//     [--speculative 2,3,4] [--batch 1,8] [--rounds 3] [--temperatures 0,0.2,0.8] [--samples 4]
//     [--threads 1] [--python PATH|none] [--ignore-eos] [--device cpu|cuda] [--dtype fp32|bf16]
//     [--random 1b|small|bench] [--drafting-only]
// --drafting-only prints the greedy tokens per forward at the largest K and exits (the training
// script's stopping test).
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.h"
#include "data/tokenizer.h"
#include "eval/benchmarks.h"
#include "eval/decoder.h"
#include "eval/load_model.h"
#include "model/kv_cache.h"

namespace fs = std::filesystem;

namespace {

const std::string g_src = WMTP_SOURCE_DIR_BENCH;
const std::string g_bin = WMTP_BIN_DIR_BENCH;

struct Options {
  std::string checkpoint, tokenizer = "build/tiny/tokenizer.model", tasks = "data/tiny/tasks_mbpp.jsonl", python;
  std::string device = "cpu", dtype = "fp32", random;
  std::vector<int64_t> speculative = {2, 3, 4}, batch = {1, 8};
  std::vector<double> temperatures = {0.0, 0.2, 0.8};
  int64_t max_new_tokens = 128, rounds = 3, threads = 1, samples = 4;
  double top_p = 0.95;
  bool eos = true, drafting_only = false;
  int64_t vocab = 0;  // the tokenizer's ids (a padded model vocabulary decodes over these only); 0: the model's
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

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
    auto ints = [&] {
      std::vector<int64_t> v;
      for (const auto& x : split(next())) v.push_back(std::stoll(x));
      return v;
    };
    if (a == "--checkpoint") o.checkpoint = next();
    else if (a == "--tokenizer")
      o.tokenizer = next();
    else if (a == "--tasks")
      o.tasks = next();
    else if (a == "--max-new-tokens")
      o.max_new_tokens = std::stoll(next());
    else if (a == "--speculative")
      o.speculative = ints();
    else if (a == "--batch")
      o.batch = ints();
    else if (a == "--rounds")
      o.rounds = std::stoll(next());
    else if (a == "--samples")
      o.samples = std::stoll(next());
    else if (a == "--top-p")
      o.top_p = std::stod(next());
    else if (a == "--threads")
      o.threads = std::stoll(next());
    else if (a == "--python")
      o.python = next();
    else if (a == "--device")
      o.device = next();
    else if (a == "--dtype")
      o.dtype = next();
    else if (a == "--random")
      o.random = next();
    else if (a == "--ignore-eos")
      o.eos = false;
    else if (a == "--drafting-only")
      o.drafting_only = true;
    else if (a == "--temperatures") {
      o.temperatures.clear();
      for (const auto& x : split(next())) o.temperatures.push_back(std::stod(x));
    } else {
      fprintf(stderr,
              "usage: bench-generate-throughput [--checkpoint CKPT.h5] [--tokenizer T.model] [--tasks MBPP.jsonl] "
              "[--max-new-tokens N] [--speculative K,K..] [--batch B,B..] [--rounds R] [--temperatures T,T..] "
              "[--samples S] [--top-p P] [--threads T] [--python PATH|none] [--ignore-eos] [--device D] "
              "[--dtype fp32|bf16] [--random 1b|small|bench] [--drafting-only]\n");
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

// The 1-minute load average (the machine may be shared: every timed figure is printed beside it).
double load_average() {
  double l = -1.0;
  std::ifstream("/proc/loadavg") >> l;
  return l;
}

// The newest checkpoint in `dir` ("" when there is none).
std::string latest_in(const fs::path& dir) {
  std::string latest = read_all((dir / "latest").string());
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  return latest.empty() ? "" : (dir / latest).string();
}

// The bench model (bench/train-generate-model.sh), else the model the demo evaluates.
std::string default_checkpoint() {
  if (fs::exists("runs/bench-generate/model.h5")) return "runs/bench-generate/model.h5";
  return latest_in("runs/tiny/full220/checkpoints");
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

// Random weights of a named shape (fp32 init on the host, then the compute dtype on the device).
wmtp::GenerationModel random_model(const std::string& shape, const std::string& dtype, const std::string& device) {
  wmtp::ModelArgs a;
  if (shape == "1b") a.dim = 2048, a.n_layers = 16, a.n_heads = 16, a.n_kv_heads = 8;
  else if (shape == "small")
    a.dim = 512, a.n_layers = 8, a.n_heads = 8, a.n_kv_heads = 8;
  else if (shape != "bench")
    throw std::runtime_error("--random must be 1b, small or bench, got '" + shape + "'");
  a.vocab_size = 32000, a.multiple_of = 256, a.n_future_tokens = 4, a.max_seq_len = 2048;
  if (shape == "bench")  // the bench model's shape (bench/train-generate-model.sh): dim 64, 28 trunk blocks + 4 heads
    a.dim = 64, a.n_layers = 32, a.n_heads = 4, a.n_kv_heads = 2, a.vocab_size = 512, a.multiple_of = 32,
    a.max_seq_len = 256;
  wmtp::GenerationModel g;
  g.dtype = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  g.device = at::Device(device);
  g.model = std::make_unique<wmtp::MtpModel>(a);
  auto params = g.model->init_params(1);
  for (auto& kv : params) kv.second = kv.second.to(g.device, g.dtype);
  g.params = std::make_unique<wmtp::LocalParams>(g.model->param_specs(), std::move(params));
  return g;
}

void sync(const at::Device& d) {
  if (d.is_cuda()) at::empty({1}, at::TensorOptions().device(d)).cpu();  // waits for the device's queue
}

struct Config {
  int64_t K = 1, batch = 1;
  double temperature = 0.0;
  int64_t samples = 1;  // per prompt
  std::string name() const {
    return (K == 1 ? std::string("plain") : "speculative " + std::to_string(K)) + ", batch " + std::to_string(batch);
  }
};

struct Run {
  double seconds = 0.0, load = 0.0;
  wmtp::DecodeStats stats;
  std::vector<std::vector<int64_t>> tokens;
  double tokens_per_sec() const { return static_cast<double>(stats.tokens) / seconds; }
  double tokens_per_forward() const { return static_cast<double>(stats.tokens) / static_cast<double>(stats.forwards); }
  double seconds_per_forward() const { return seconds / static_cast<double>(stats.forwards); }
};

// Every prompt (times c.samples) decoded c.batch at a time, each (prompt, sample) from its own stream.
Run decode_all(const wmtp::GenerationModel& gm, const std::vector<std::vector<int64_t>>& prompts, const Options& o,
               int64_t eos_id, const Config& c) {
  wmtp::DecodeOptions d;
  d.max_new_tokens = o.max_new_tokens;
  d.eos_id = eos_id;
  d.vocab = o.vocab;
  d.speculative = c.K;
  d.sampling = {c.temperature, o.top_p};
  d.dtype = gm.dtype;
  d.device = gm.device;
  std::vector<std::pair<size_t, int64_t>> keys;
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int64_t s = 0; s < c.samples; ++s) keys.push_back({i, s});
  Run r;
  r.stats.drafted.assign(static_cast<size_t>(c.K - 1), 0);
  r.stats.accepted = r.stats.drafted;
  sync(gm.device);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t first = 0; first < keys.size(); first += static_cast<size_t>(c.batch)) {
    std::vector<std::vector<int64_t>> sub;
    std::vector<wmtp::TokenRng> rngs;
    for (size_t j = first; j < std::min(keys.size(), first + static_cast<size_t>(c.batch)); ++j) {
      sub.push_back(prompts[keys[j].first]);
      rngs.push_back(wmtp::stream_rng(42, static_cast<int64_t>(keys[j].first), keys[j].second));
    }
    for (auto& res : wmtp::decode_batch(*gm.model, *gm.params, sub, d, rngs, {}, &r.stats))
      r.tokens.push_back(res.tokens);
  }
  sync(gm.device);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.load = load_average();
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string acceptance(const wmtp::DecodeStats& s) {
  std::string out;
  for (size_t k = 0; k < s.drafted.size(); ++k) {
    char buf[32];
    snprintf(buf, sizeof buf, "%s%.2f", k ? " " : "",
             s.drafted[k] ? static_cast<double>(s.accepted[k]) / static_cast<double>(s.drafted[k]) : 0.0);
    out += buf;
  }
  return out.empty() ? "-" : out;
}

// The PyTorch peer (batch 1 greedy) on an export of the checkpoint: prepared once, run once per round.
struct Peer {
  fs::path dir;
  std::string cmd;
  bool ready = false;
  struct Result {
    double tokens_per_sec = 0.0, seconds = 0.0, load = 0.0;
    std::vector<std::vector<int64_t>> tokens;
    std::string config;
  };

  Peer(const Options& o, const std::vector<std::vector<int64_t>>& prompts, int64_t eos) {
    const std::string python = torch_python(o.python);
    if (python.empty() || !o.random.empty() || o.device != "cpu" || o.dtype != "fp32") {
      printf("peer: skipped (%s)\n",
             !o.random.empty() || o.device != "cpu" || o.dtype != "fp32"
                 ? "the peer runs a checkpoint in fp32 on the CPU"
                 : "no python with torch and safetensors: make bench builds against .venv-torch; or --python PATH");
      return;
    }
    dir = fs::temp_directory_path() / ("wmtp-bench-generate-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    wmtp::json::Value list = wmtp::json::Value::array();
    for (const auto& p : prompts) {
      wmtp::json::Value ids = wmtp::json::Value::array();
      for (int64_t t : p) ids.push(t);
      list.push(std::move(ids));
    }
    std::ofstream((dir / "prompts.json").string()) << wmtp::json::dump(list);
    const std::string exp = g_bin + "/convert-checkpoint export --input '" + o.checkpoint + "' --output '" +
                            (dir / "model").string() + "' --names meta --dtype fp32 > " +
                            (dir / "export.log").string() + " 2>&1";
    if (shell(exp) != 0) {
      printf("peer: the export failed:\n%s", read_all((dir / "export.log").string()).c_str());
      return;
    }
    cmd = "OMP_NUM_THREADS=" + std::to_string(o.threads) + " " + python + " " + g_src +
          "/bench/python/generate_peer.py --model '" + (dir / "model").string() + "' --prompts '" +
          (dir / "prompts.json").string() + "' --max-new-tokens " + std::to_string(o.max_new_tokens) + " --threads " +
          std::to_string(o.threads) + " --eos-id " + std::to_string(eos) + " > " + (dir / "peer.out").string() +
          " 2>&1";
    ready = true;
  }
  ~Peer() {
    if (!dir.empty()) fs::remove_all(dir);
  }
  bool run(Result& r) const {
    if (!ready) return false;
    if (shell(cmd) != 0) {
      printf("peer: failed:\n%s", read_all((dir / "peer.out").string()).c_str());
      return false;
    }
    r.load = load_average();
    std::istringstream out(read_all((dir / "peer.out").string()));
    std::string line;
    while (std::getline(out, line))
      if (line.rfind("PEER ", 0) == 0) break;
    const wmtp::json::Value v = wmtp::json::parse(line.substr(5));
    r.tokens_per_sec = v.at("tokens_per_sec").as_double();
    r.seconds = v.at("seconds").as_double();
    r.config = v.at("config").as_string();
    r.tokens.clear();
    for (const auto& p : v.at("tokens").as_array()) {
      r.tokens.emplace_back();
      for (const auto& t : p.as_array()) r.tokens.back().push_back(t.as_int());
    }
    return true;
  }
};

size_t same_ids(const std::vector<std::vector<int64_t>>& a, const std::vector<std::vector<int64_t>>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] == b[i] ? 1 : 0;
  return n;
}

// The rounds: every configuration once per round, then the medians.
void speed_table(const wmtp::GenerationModel& gm, const std::vector<std::vector<int64_t>>& prompts, const Options& o,
                 int64_t eos, const std::vector<Config>& configs, const Peer& peer) {
  std::vector<std::vector<Run>> runs(configs.size());
  std::vector<Peer::Result> peer_runs;
  for (int64_t round = 1; round <= o.rounds; ++round) {
    printf("round %lld:\n", static_cast<long long>(round));
    for (size_t c = 0; c < configs.size(); ++c) {
      runs[c].push_back(decode_all(gm, prompts, o, eos, configs[c]));
      const Run& r = runs[c].back();
      printf("  %-26s %9.1f tokens/s  %.3f s  %.3f tokens/forward  (load %.2f)\n", configs[c].name().c_str(),
             r.tokens_per_sec(), r.seconds, r.tokens_per_forward(), r.load);
    }
    Peer::Result p;
    if (peer.run(p)) {
      printf("  %-26s %9.1f tokens/s  %.3f s  (load %.2f)\n", "PyTorch peer, batch 1", p.tokens_per_sec, p.seconds,
             p.load);
      peer_runs.push_back(std::move(p));
    }
    fflush(stdout);
  }
  // Per configuration: the medians over rounds; the plain configuration of the same batch size is the
  // reference of the forward's cost and of the speed-up.
  std::map<int64_t, size_t> plain_of;
  for (size_t c = 0; c < configs.size(); ++c)
    if (configs[c].K == 1) plain_of[configs[c].batch] = c;
  const size_t ref = plain_of.count(1) ? plain_of[1] : 0;
  std::vector<double> peer_tps;
  for (const auto& p : peer_runs) peer_tps.push_back(p.tokens_per_sec);
  const double peer_median = median(peer_tps);
  printf("\nmedians of %lld rounds (load average over the rounds: ", static_cast<long long>(o.rounds));
  std::vector<double> loads;
  for (const auto& rs : runs)
    for (const auto& r : rs) loads.push_back(r.load);
  printf("%.2f-%.2f)\n", *std::min_element(loads.begin(), loads.end()), *std::max_element(loads.begin(), loads.end()));
  printf(
      "| configuration | tokens/s | tokens per forward | acceptance per head | one forward, in plain forwards | "
      "speed-up over plain (same batch) | over plain batch 1 | over the peer | same ids as plain batch 1 |\n");
  printf("|---|---|---|---|---|---|---|---|---|\n");
  for (size_t c = 0; c < configs.size(); ++c) {
    const auto& rs = runs[c];
    const size_t p = plain_of.count(configs[c].batch) ? plain_of[configs[c].batch] : ref;
    std::vector<double> tps, cost, up, up1;
    for (size_t r = 0; r < rs.size(); ++r) {
      tps.push_back(rs[r].tokens_per_sec());
      cost.push_back(rs[r].seconds_per_forward() / runs[p][r].seconds_per_forward());
      up.push_back(rs[r].tokens_per_sec() / runs[p][r].tokens_per_sec());
      up1.push_back(rs[r].tokens_per_sec() / runs[ref][r].tokens_per_sec());
    }
    auto mm = [](const std::vector<double>& v) { return std::minmax_element(v.begin(), v.end()); };
    char peer_col[64] = "-";
    if (peer_median > 0.0) snprintf(peer_col, sizeof peer_col, "%.2fx", median(tps) / peer_median);
    printf("| %s | %.1f (%.1f-%.1f) | %.3f | %s | %.2f | %.2fx (%.2f-%.2f) | %.2fx | %s | %zu of %zu |\n",
           configs[c].name().c_str(), median(tps), *mm(tps).first, *mm(tps).second, rs.front().tokens_per_forward(),
           acceptance(rs.front().stats).c_str(), median(cost), median(up), *mm(up).first, *mm(up).second, median(up1),
           peer_col, same_ids(rs.front().tokens, runs[ref].front().tokens), prompts.size());
  }
  if (!peer_runs.empty()) {
    printf("| PyTorch peer, batch 1 | %.1f (%.1f-%.1f) | 1 | - | - | - | %.2fx | 1.00x | %zu of %zu |\n", peer_median,
           *std::min_element(peer_tps.begin(), peer_tps.end()), *std::max_element(peer_tps.begin(), peer_tps.end()),
           peer_median / median([&] {
             std::vector<double> v;
             for (const auto& r : runs[ref]) v.push_back(r.tokens_per_sec());
             return v;
           }()),
           same_ids(peer_runs.front().tokens, runs[ref].front().tokens), prompts.size());
    printf("  peer: %s\n", peer_runs.front().config.c_str());
  }
}

// The CPU time of this thread: on a loaded machine it moves far less than wall time (a breakdown
// of one forward into pieces needs that; the tables above are wall time).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Where one forward of decoding (batch 1) spends its time, speculative K beside plain, in plain
// forwards (trunk + head 0 over one token, one unembedding, argmax), in this thread's CPU time (CPU
// only). Pieces run `iters` times alone at a cache of the first prompt's length: the trunk over the
// forward's positions (K, or 1), its head blocks (K, or head 0), the one unembedding of every head at
// every position with its argmax and host copy, and the positions and masks a forward at a new cache
// length builds (the trunk at alternating lengths less the trunk at one). The rest comes from decoding
// every prompt: the prefill (each prompt through the trunk and the heads once: a decode of one token
// per prompt), spread over the decode's forwards, and what the decoder adds per forward (its CPU time
// per forward less the prefill's share and the pieces: verdicts, token and index tensors, stacking,
// cache truncation, the cache's allocation).
struct ForwardCost {
  double trunk = 0, heads = 0, unembed = 0, positions = 0, prefill = 0, own = 0, all = 0;
};

ForwardCost forward_cost(const wmtp::GenerationModel& gm, const std::vector<std::vector<int64_t>>& prompts,
                         const Options& o, int64_t eos, int64_t K, int64_t iters, double* plain_seconds) {
  const std::vector<int64_t>& prompt = prompts.front();
  c10::NoGradGuard no_grad;
  const wmtp::MtpModel& m = *gm.model;
  wmtp::ParamSource& src = *gm.params;
  const int64_t P = static_cast<int64_t>(prompt.size());
  wmtp::DecodeCache cache = wmtp::make_decode_cache(m, 1, P + K, gm.dtype, gm.device, K);
  c10::InferenceMode inference;  // as the decoder runs its forwards
  auto longs = at::TensorOptions().dtype(at::kLong);
  wmtp::forward_trunk_cached(m, src, at::tensor(prompt, longs).view({1, -1}).to(gm.device), cache);
  at::Tensor z0 = at::zeros({1, P, m.args().dim}, at::TensorOptions().dtype(gm.dtype).device(gm.device));
  for (int64_t k = 0; k < K; ++k) wmtp::forward_head_block_cached(m, src, k, z0, cache);  // heads' caches at P too
  const at::Tensor one = at::zeros({1, 1}, longs).to(gm.device), toks = at::zeros({1, K}, longs).to(gm.device);
  int64_t flip = 0;
  auto timed = [&](const std::function<void()>& f, bool new_length = false) {
    auto reset = [&] {  // new_length: the trunk's caches alternately at P - 1 and P (the heads' stay at P)
      if (!new_length) return cache.truncate(P);
      for (wmtp::BlockKvCache& b : cache.trunk) b.lens.assign(1, P - (++flip % 2));
    };
    f();  // warm
    reset();
    double best = 1e30;  // the least of 5 batches: other processes only ever add time
    for (int64_t batch = 0; batch < 5; ++batch) {
      const double t0 = thread_cpu_seconds();
      for (int64_t i = 0; i < iters / 5; ++i) {
        f();
        reset();
      }
      best = std::min(best, (thread_cpu_seconds() - t0) / static_cast<double>(iters / 5));
    }
    return best;
  };
  const double plain = timed([&] {
    at::Tensor h = wmtp::forward_head_block_cached(m, src, 0, wmtp::forward_trunk_cached(m, src, one, cache), cache);
    m.forward_output(src, h.select(1, 0)).argmax(-1).cpu();
  });
  *plain_seconds = plain;
  at::Tensor z;
  ForwardCost c;
  c.trunk = timed([&] { z = wmtp::forward_trunk_cached(m, src, toks, cache); });
  c.positions = std::max(0.0, timed([&] { wmtp::forward_trunk_cached(m, src, toks, cache); }, true) - c.trunk);
  for (wmtp::BlockKvCache& b : cache.trunk) b.lens.assign(1, P);
  std::vector<at::Tensor> h(static_cast<size_t>(K));
  c.heads = timed([&] {
    for (int64_t k = 0; k < K; ++k) h[static_cast<size_t>(k)] = wmtp::forward_head_block_cached(m, src, k, z, cache);
  });
  c.unembed = timed([&] { m.forward_output(src, at::stack(h, 2).reshape({K, K, -1})).argmax(-1).cpu(); });
  const Config cfg{K, 1};
  const double c0 = thread_cpu_seconds();
  const Run run = decode_all(gm, prompts, o, eos, cfg);
  const double decode = thread_cpu_seconds() - c0;
  Options first = o;
  first.max_new_tokens = 1;
  const double c1 = thread_cpu_seconds();
  decode_all(gm, prompts, first, eos, cfg);
  const double prefill = thread_cpu_seconds() - c1;
  const double forwards = static_cast<double>(run.stats.forwards);
  c.prefill = prefill / forwards;
  c.all = decode / forwards;
  c.own = c.all - c.prefill - c.trunk - c.positions - c.heads - c.unembed;
  for (double* x : {&c.trunk, &c.heads, &c.unembed, &c.positions, &c.prefill, &c.own, &c.all}) *x /= plain;
  return c;
}

void cost_breakdown(const wmtp::GenerationModel& gm, const std::vector<std::vector<int64_t>>& prompts, const Options& o,
                    int64_t eos, int64_t K, int64_t iters) {
  double plain_seconds = 0.0, spec_seconds = 0.0;
  const ForwardCost p = forward_cost(gm, prompts, o, eos, 1, iters, &plain_seconds);
  const ForwardCost s = forward_cost(gm, prompts, o, eos, K, iters, &spec_seconds);
  printf(
      "\none forward (batch 1), in plain forwards of CPU time (a plain forward: %.3f ms; each piece: the least of 5 "
      "batches of %lld runs):\n",
      1e3 * 0.5 * (plain_seconds + spec_seconds), static_cast<long long>(iters / 5));
  printf("| piece | speculative %lld | plain |\n|---|---|---|\n", static_cast<long long>(K));
  const std::pair<const char*, double ForwardCost::*> rows[] = {
      {"trunk over the forward's positions", &ForwardCost::trunk},
      {"head blocks", &ForwardCost::heads},
      {"one unembedding of every head at every position, argmax", &ForwardCost::unembed},
      {"a new cache length each forward (positions, masks)", &ForwardCost::positions},
      {"prefill, spread over the forwards", &ForwardCost::prefill},
      {"the decoder's own work", &ForwardCost::own},
      {"in all", &ForwardCost::all}};
  for (const auto& [name, field] : rows) printf("| %s | %.3f | %.3f |\n", name, s.*field, p.*field);
}

// Tokens per forward and acceptance per head at each temperature, against greedy's.
void temperature_table(const wmtp::GenerationModel& gm, const std::vector<std::vector<int64_t>>& prompts,
                       const Options& o, int64_t eos, int64_t K, int64_t batch) {
  printf("\nacceptance at temperature: --speculative %lld, batch %lld, top-p %.2f (sampled: %lld samples per prompt)\n",
         static_cast<long long>(K), static_cast<long long>(batch), o.top_p, static_cast<long long>(o.samples));
  printf("| temperature | tokens | tokens per forward | of greedy's | acceptance per head |\n|---|---|---|---|---|\n");
  double greedy_tpf = 0.0;
  for (double T : o.temperatures) {
    Config c{K, batch, T, T > 0.0 ? o.samples : 1};
    const Run r = decode_all(gm, prompts, o, eos, c);
    if (T <= 0.0) greedy_tpf = r.tokens_per_forward();
    char rel[32] = "-";
    if (greedy_tpf > 0.0) snprintf(rel, sizeof rel, "%.0f %%", 100.0 * r.tokens_per_forward() / greedy_tpf);
    printf("| %s | %lld | %.3f | %s | %s |\n", T <= 0.0 ? "0 (greedy)" : std::to_string(T).substr(0, 4).c_str(),
           static_cast<long long>(r.stats.tokens), r.tokens_per_forward(), rel, acceptance(r.stats).c_str());
    fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    at::set_num_threads(static_cast<int>(o.threads));
    wmtp::GenerationModel gm;
    std::vector<std::vector<int64_t>> prompts;
    int64_t eos = -1;
    if (!o.random.empty()) {
      gm = random_model(o.random, o.dtype, o.device);
      at::Generator g = at::make_generator<at::CPUGeneratorImpl>(7);
      for (int i = 0; i < 16; ++i) {
        at::Tensor t = at::randint(gm.model->args().vocab_size, {64}, g, at::TensorOptions().dtype(at::kLong));
        prompts.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + 64);
      }
      o.eos = false;
    } else {
      if (o.checkpoint.empty()) o.checkpoint = default_checkpoint();
      if (o.checkpoint.empty() || !fs::exists(o.checkpoint)) {
        fprintf(stderr,
                "bench-generate-throughput: no checkpoint (run bench/train-generate-model.sh or `make demo` "
                "first, or pass --checkpoint)\n");
        return 2;
      }
      gm = wmtp::load_generation_model(o.checkpoint, "", o.dtype, o.device);
      const wmtp::Tokenizer tok = wmtp::Tokenizer::load(o.tokenizer);
      for (const wmtp::BenchTask& t : wmtp::load_benchmark("mbpp", o.tasks, 0)) {
        std::vector<int64_t> ids{tok.bos_id()};
        for (int32_t id : tok.encode(t.prompt)) ids.push_back(id);
        prompts.push_back(std::move(ids));
      }
      if (o.eos) eos = tok.eos_id();
      o.vocab = tok.vocab_size();
    }
    const wmtp::ModelArgs& a = gm.model->args();
    std::vector<int64_t> ks;
    for (int64_t K : o.speculative)
      if (K >= 2 && K <= gm.model->n_future()) ks.push_back(K);
    const int64_t K_max = ks.empty() ? 1 : *std::max_element(ks.begin(), ks.end());
    if (o.drafting_only) {
      const Run r = decode_all(gm, prompts, o, eos, Config{K_max, 8});
      printf("tokens per forward %.3f (--speculative %lld, greedy); acceptance per head %s\n", r.tokens_per_forward(),
             static_cast<long long>(K_max), acceptance(r.stats).c_str());
      return 0;
    }
    printf(
        "model %s: dim %lld, %lld trunk blocks, %lld heads of one block each (trunk : one head block = %lld : 1), "
        "vocab %lld\n",
        o.random.empty() ? o.checkpoint.c_str() : ("random " + o.random).c_str(), static_cast<long long>(a.dim),
        static_cast<long long>(a.n_trunk_blocks()), static_cast<long long>(a.n_future_tokens),
        static_cast<long long>(a.n_trunk_blocks()), static_cast<long long>(a.vocab_size));
    printf("%zu prompts, %lld new tokens each%s, %s %s, %lld thread(s), %lld rounds\n", prompts.size(),
           static_cast<long long>(o.max_new_tokens), o.eos ? " at most (stop at EOS)" : " (EOS ignored)",
           o.dtype.c_str(), o.device.c_str(), static_cast<long long>(o.threads), static_cast<long long>(o.rounds));
    std::vector<Config> configs;
    for (int64_t b : o.batch) {
      configs.push_back(Config{1, b});
      for (int64_t K : ks) configs.push_back(Config{K, b});
    }
    // Warm-up (allocator, RoPE tables, the first prompt of each batch size), untimed.
    for (int64_t b : o.batch) {
      const std::vector<std::vector<int64_t>> first(prompts.begin(),
                                                    prompts.begin() + std::min<int64_t>(prompts.size(), b));
      decode_all(gm, first, o, eos, Config{K_max, b});
    }
    const Peer peer(o, prompts, eos);
    speed_table(gm, prompts, o, eos, configs, peer);
    if (K_max >= 2 && !gm.device.is_cuda()) cost_breakdown(gm, prompts, o, eos, K_max, 200);
    if (K_max >= 2 && !o.temperatures.empty())
      temperature_table(gm, prompts, o, eos, K_max, *std::max_element(o.batch.begin(), o.batch.end()));
    return 0;
  } catch (const std::exception& e) {
    fprintf(stderr, "bench-generate-throughput: %s\n", e.what());
    return 1;
  }
}
