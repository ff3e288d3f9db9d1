// bench-preprocess: preprocess-metadata throughput (samples/s) on a generated 100k-line JSONL, at
// -np 1 and -np 2, side by side; plus single-thread tokenization alone as the ceiling per rank.
// Prints figures and the np2/np1 ratio; asserts nothing.
//
//   build/bench/bench-preprocess [--lines N] [--bin DIR] [--source DIR] [--keep]
// The corpus is data/tiny/train.jsonl repeated with distinct task ids and solution variants; the
// tokenizer is the tiny one (data/make_tokenizer.sh). mpirun comes from PATH.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/timer.h"
#include "data/alpaca.h"
#include "data/tokenizer.h"

namespace fs = std::filesystem;

namespace {

struct Args {
  int64_t lines = 100000;
  std::string bin, source;
  bool keep = false;
};

std::string shell_quote(const std::string& s) { return "'" + std::regex_replace(s, std::regex("'"), "'\\''") + "'"; }

int run(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  std::string text;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  int st = pclose(p);
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// Writes `lines` JSONL lines built from the tiny corpus; returns the total bytes.
int64_t generate_corpus(const std::string& src_jsonl, const std::string& out, int64_t lines) {
  std::ifstream in(src_jsonl);
  std::vector<wmtp::json::Value> base;
  std::string line;
  while (std::getline(in, line)) base.push_back(wmtp::json::parse(line));
  std::ofstream o(out);
  for (int64_t i = 0; i < lines; ++i) {
    wmtp::json::Value v = base[static_cast<size_t>(i) % base.size()];
    const int64_t copy = i / static_cast<int64_t>(base.size());
    std::string task = v.at("task_id").as_string();
    // Keep the correctness suffix so problems stay problems: "<problem>_r<copy>_<correct|incorrect>_<n>".
    std::smatch m;
    if (std::regex_match(task, m, std::regex("(.*)_(correct|incorrect)_([0-9]+)")))
      task = m[1].str() + "_r" + std::to_string(copy) + "_" + m[2].str() + "_" + m[3].str();
    v.set("task_id", task);
    v.set("output", v.at("output").as_string() + "# variant " + std::to_string(copy) + "\n");
    o << wmtp::json::dump(v) << "\n";
  }
  o.close();
  return static_cast<int64_t>(fs::file_size(out));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  a.source = fs::path(__FILE__).parent_path().parent_path().string();
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << k << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--lines") a.lines = std::stoll(val());
    else if (k == "--bin")
      a.bin = val();
    else if (k == "--source")
      a.source = val();
    else if (k == "--keep")
      a.keep = true;
    else {
      std::cerr << "usage: bench-preprocess [--lines N] [--bin DIR] [--source DIR] [--keep]\n";
      return k == "--help" ? 0 : 2;
    }
  }
  if (a.bin.empty()) {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    for (fs::path cand : {exe.parent_path().parent_path() / "bin", fs::path(a.source) / "bin"})
      if (fs::exists(cand / "preprocess-metadata")) {
        a.bin = cand.string();
        break;
      }
  }
  if (a.bin.empty() || !fs::exists(fs::path(a.bin) / "preprocess-metadata")) {
    std::cerr << "bench-preprocess: bin/preprocess-metadata not found; pass --bin DIR\n";
    return 2;
  }
  const fs::path work = fs::temp_directory_path() / ("wmtp-bench-preprocess-" + std::to_string(getpid()));
  fs::create_directories(work);
  const std::string jsonl = (work / "corpus.jsonl").string();
  const std::string model_prefix = (work / "tiny").string();

  wmtp::Timer t;
  const int64_t bytes = generate_corpus(a.source + "/data/tiny/train.jsonl", jsonl, a.lines);
  std::printf("corpus: %lld lines, %.1f MB (generated in %.1f s)\n", static_cast<long long>(a.lines), bytes / 1e6,
              t.seconds());
  std::string out;
  if (run("bash " + shell_quote(a.source + "/data/make_tokenizer.sh") + " " + shell_quote(model_prefix), &out) != 0) {
    std::cerr << "make_tokenizer.sh failed:\n" << out;
    return 1;
  }
  const std::string model = model_prefix + ".model";

  // Ceilings, one thread in this process: JSON parsing alone, then parsing + tokenizing.
  {
    std::ifstream in(jsonl);
    std::string line;
    int64_t n = 0;
    wmtp::Timer tp;
    while (std::getline(in, line)) n += wmtp::json::parse(line).is_object();
    std::printf("parse only (1 thread, in process): %.0f samples/s\n", n / tp.seconds());
  }
  {
    wmtp::Tokenizer tok = wmtp::Tokenizer::load(model);
    std::ifstream in(jsonl);
    std::string line;
    int64_t n = 0, tokens = 0;
    wmtp::Timer tt;
    while (std::getline(in, line)) {
      wmtp::json::Value v = wmtp::json::parse(line);
      auto s = wmtp::encode_alpaca_sample(tok, v.at("instruction").as_string(), v.at("input").as_string(),
                                          v.at("output").as_string(), true);
      tokens += static_cast<int64_t>(s.tokens.size());
      ++n;
    }
    const double sec = tt.seconds();
    std::printf("parse + tokenize only (1 thread, in process): %.0f samples/s, %.2f M tokens/s\n", n / sec,
                tokens / sec / 1e6);
  }

  std::string mpirun = "mpirun --oversubscribe";
  if (geteuid() == 0) mpirun += " --allow-run-as-root";
  double rate[3] = {0, 0, 0};
  for (int np : {1, 2}) {
    const std::string h5 = (work / ("np" + std::to_string(np) + ".h5")).string();
    const std::string cmd = mpirun + " -np " + std::to_string(np) + " " + shell_quote(a.bin + "/preprocess-metadata") +
                            " --input " + shell_quote(jsonl) + " --tokenizer " + shell_quote(model) + " --output " +
                            shell_quote(h5);
    auto child_cpu = [] {
      rusage ru{};
      getrusage(RUSAGE_CHILDREN, &ru);
      return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
    };
    const double cpu0 = child_cpu();
    wmtp::Timer w;
    int rc = run(cmd, &out);
    const double wall = w.seconds();
    const double cpu = child_cpu() - cpu0;  // all ranks' CPU time: equal at -np 1 and 2 = no overhead
    if (rc != 0) {
      std::cerr << "preprocess-metadata -np " << np << " failed (" << rc << "):\n" << out;
      return 1;
    }
    // The program's own figure excludes MPI and library start-up.
    double inner = 0;
    std::smatch m;
    if (std::regex_search(out, m, std::regex("in ([0-9.]+) s \\("))) inner = std::stod(m[1].str());
    rate[np] = inner > 0 ? a.lines / inner : 0;
    std::printf(
        "-np %d: %.2f s in the program (%.0f samples/s), %.2f s wall with start-up (%.0f samples/s), "
        "%.1f CPU-s over all ranks, %.1f MB out\n",
        np, inner, rate[np], wall, a.lines / wall, cpu, fs::file_size(h5) / 1e6);
  }
  if (rate[1] > 0) std::printf("speed-up -np 2 / -np 1: %.2fx (in-program)\n", rate[2] / rate[1]);
  std::printf("load average now: %s",
              [] {
                std::ifstream l("/proc/loadavg");
                std::string s;
                std::getline(l, s);
                return s + " (the speed-up needs as many idle cores as ranks)\n";
              }()
                  .c_str());
  if (!a.keep) fs::remove_all(work);
  else
    std::printf("kept %s\n", work.c_str());
  return 0;
}
