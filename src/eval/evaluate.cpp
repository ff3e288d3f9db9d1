// evaluate: generate, score in the sandbox, pass@k per task and averaged, files on rank 0.
#include "eval/evaluate.h"

#include <chrono>
#include <filesystem>
#include <set>
#include <sstream>

#include "comm/agree.h"
#include "comm/mpi_util.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/output_path.h"
#include "data/tokenizer.h"
#include "eval/benchmarks.h"
#include "eval/generate.h"
#include "eval/load_model.h"
#include "eval/option_checks.h"
#include "eval/pass_at_k.h"
#include "track/fanout.h"
#include "track/mlflow_store.h"
#include "track/run_record.h"

namespace fs = std::filesystem;

namespace wmtp {

namespace {
constexpr size_t kSampleTasks = 10;  // tasks whose completions go to samples.jsonl

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

// Directory names for the checkpoints: file stems, made unique. A stem seen before gets the first
// free "_N", free meaning neither given out nor the stem of any checkpoint of the run (a/step.h5,
// b/step.h5 and c/step_1.h5 give step, step_2, step_1); a stem that is no directory name of its own
// (empty, ".", "..") or is the run's summary.json is "checkpoint" instead.
std::vector<std::string> run_names(const std::vector<std::string>& paths) {
  auto stem = [](const std::string& p) {
    const std::string n = fs::path(p).stem().string();
    return n.empty() || n == "." || n == ".." || n == "summary.json" ? std::string("checkpoint") : n;
  };
  std::set<std::string> stems, taken;
  for (const auto& p : paths) stems.insert(stem(p));
  std::vector<std::string> names;
  for (const auto& p : paths) {
    std::string n = stem(p);
    for (int k = 1; taken.count(n); ++k) {
      n = stem(p) + "_" + std::to_string(k);
      if (stems.count(n)) n = stem(p);  // another checkpoint's own name: keep looking
    }
    taken.insert(n);
    names.push_back(n);
  }
  return names;
}

// Each checkpoint's result directory made (a file in its way is a usage error before the evaluation,
// not after it), and the results of an earlier evaluation in `output` that this one would leave beside
// its own removed: the run's summary.json (written again when every checkpoint is done, so it is
// there only for a complete run) and the result files of the directories this run writes. Rank 0.
void prepare_result_dirs(const fs::path& output, const std::vector<std::string>& names, const Logger& log) {
  std::vector<fs::path> files = {output / "summary.json"};
  for (const auto& n : names) {
    check_output_dir((output / n).string(), "--output");
    for (const char* f : {"tasks.csv", "samples.jsonl", "summary.json"}) files.push_back(output / n / f);
  }
  int removed = 0;
  for (const auto& f : files) {
    std::error_code ec;
    if (fs::remove(f, ec)) ++removed;
    else if (ec)
      throw_input("--output: cannot remove an earlier result ", f.string(), ": ", ec.message());
  }
  if (removed > 0) log.info("removed %d result file(s) of an earlier evaluation in %s", removed, output.c_str());
}

// The executable --python names, as the interpreter itself reports it (sys.executable): a name on
// PATH may be a launcher script (a pyenv shim is a bash script that spends ~0.3 s finding the real
// interpreter), which every one of thousands of programs would run again. Run once here, as the
// evaluator and outside the sandbox: --python is the user's interpreter, not generated code. When it
// cannot say, the name is kept and the probe below reports what is wrong with it.
std::string resolve_interpreter(const std::string& python) {
  std::string quoted = "'";
  for (char ch : python) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  quoted += "'";
  FILE* pipe = popen((quoted + " -c 'import sys; print(sys.executable)' 2>/dev/null").c_str(), "r");
  if (!pipe) return python;
  char buf[4096];
  std::string out;
  while (fgets(buf, sizeof buf, pipe)) out += buf;
  const int rc = pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return rc == 0 && !out.empty() && out[0] == '/' && fs::exists(out) ? out : python;
}

// Every program runs under --python in the sandbox; one the sandbox cannot start (missing, under the
// host's /tmp, in a directory the program's uid may not enter) would fail every sample: pass@k 0 and
// no word. So one program runs first, and anything but its line is an input error naming the flag.
void check_interpreter(const Sandbox& box, const std::string& python) {
  const SandboxResult r = box.run({python, "probe.py"}, {{"probe.py", "print('wmtp-probe')\n"}}, "");
  if (r.ok() && r.out == "wmtp-probe\n") return;
  const std::string err = r.err.size() > 300 ? "..." + r.err.substr(r.err.size() - 300) : r.err;
  throw_input("--python '", python, "' does not run in the sandbox: ", r.describe(),
              err.empty() ? "" : " (stderr: " + err + ")",
              box.isolated() ? "; the programs' root directory holds /usr, /bin, /sbin, /lib*, /etc and the "
                               "directory above the interpreter's (a venv, conda or pyenv prefix), never one under "
                               "/tmp, /var/tmp or /dev/shm"
                             : "");
}

// One task on this rank: its samples generated and scored -> a JSON record.
json::Value evaluate_task(const Generator& gen, const EvaluateOptions& opt, const std::string& bench,
                          const BenchTask& task, size_t index, int64_t n, const Sandbox& box, DecodeStats& stats,
                          double& generate_seconds) {
  int64_t correct = 0;
  double partial = 0.0;
  json::Value samples = json::Value::array();
  std::vector<Generator::Key> keys;
  for (int64_t s = 0; s < n; ++s) keys.push_back({static_cast<int64_t>(index), s});
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t cut_before = stats.over_context + stats.context_cut;
  const std::vector<Completion> done = gen.complete_all(std::vector<std::string>(keys.size(), task.prompt), keys,
                                                        &stats);
  generate_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t s = 0; s < n; ++s) {
    const Completion& c = done[static_cast<size_t>(s)];
    Score sc = score_completion(bench, task, c.text, box, opt.python);
    correct += sc.pass ? 1 : 0;
    partial += sc.partial;
    if (index < kSampleTasks) {
      json::Value v = json::Value::object();
      v.set("task_id", task.id);
      v.set("sample", s);
      v.set("completion", c.text);
      v.set("finish_reason", c.finish_reason);
      v.set("pass", sc.pass);
      v.set("detail", sc.detail);
      samples.push(std::move(v));
    }
  }
  json::Value r = json::Value::object();
  r.set("task_id", task.id);
  r.set("n", n);
  r.set("correct", correct);
  r.set("partial", partial / static_cast<double>(n));
  r.set("context_cut", stats.over_context + stats.context_cut > cut_before);  // a sample ended by max_seq_len
  r.set("samples", std::move(samples));
  return r;
}

json::Value write_results(const EvaluateOptions& opt, const std::string& bench, const std::string& ckpt,
                          const fs::path& dir, const std::vector<std::string>& records, int64_t n,
                          const DecodeStats& stats, double generate_seconds) {
  const std::vector<int64_t> ks = pass_at_k_list(n);
  std::string csv = "task_id,n,correct";
  for (int64_t k : ks) csv += ",pass@" + std::to_string(k);
  csv += ",partial\n";
  std::string samples;
  std::vector<double> sums(ks.size(), 0.0);
  double partial = 0.0;
  int64_t cut = 0;
  for (const auto& rec : records) {
    const json::Value r = json::parse(rec);
    cut += r.at("context_cut").as_bool() ? 1 : 0;
    const int64_t c = r.at("correct").as_int();
    std::ostringstream row;
    row << csv_field(r.at("task_id").as_string()) << ',' << n << ',' << c;
    for (size_t j = 0; j < ks.size(); ++j) {
      const double p = pass_at_k(n, c, ks[j]);
      sums[j] += p;
      row << ',' << p;
    }
    row << ',' << r.at("partial").as_double() << '\n';
    partial += r.at("partial").as_double();
    csv += row.str();
    for (const auto& s : r.at("samples").as_array()) samples += json::dump(s) + "\n";
  }
  const double T = static_cast<double>(records.size());
  json::Value sum = json::Value::object();
  sum.set("benchmark", bench);
  sum.set("checkpoint", ckpt);
  sum.set("tasks", static_cast<int64_t>(records.size()));
  sum.set("num_samples", n);
  sum.set("temperature", opt.temperature);
  sum.set("top_p", opt.top_p);
  sum.set("speculative", opt.speculative);
  for (size_t j = 0; j < ks.size(); ++j) sum.set("pass@" + std::to_string(ks[j]), sums[j] / T);
  sum.set("partial_pass_rate", partial / T);
  sum.set("tasks_cut_by_context", cut);
  sum.set("tokens_per_forward",
          stats.forwards > 0 ? static_cast<double>(stats.tokens) / static_cast<double>(stats.forwards) : 0.0);
  sum.set("generate_seconds", generate_seconds);
  json::Value acc = json::Value::array();
  for (size_t k = 0; k < stats.drafted.size(); ++k)
    acc.push(stats.drafted[k] > 0 ? static_cast<double>(stats.accepted[k]) / static_cast<double>(stats.drafted[k])
                                  : 0.0);
  sum.set("draft_acceptance_per_head", std::move(acc));
  fs::create_directories(dir);
  write_file_atomically((dir / "tasks.csv").string(), csv);
  write_file_atomically((dir / "samples.jsonl").string(), samples);
  write_file_atomically((dir / "summary.json").string(), json::dump(sum) + "\n");
  return sum;
}

// The summary's numbers to TensorBoard / MLflow ("@" is not allowed in MLflow metric names).
void track_summary(const EvaluateOptions& opt, const fs::path& dir, const json::Value& sum, int world,
                   const Logger& log) {
  std::unique_ptr<MetricsSink> sink = make_tracking_sinks(
      opt.tracking, RunRecord{dir.string(), "evaluate", world, 0, "", (dir / "summary.json").string()}, log);
  if (!sink) return;
  MetricValues values;
  for (const auto& [key, v] : sum.as_object()) {
    if (!v.is_number()) continue;
    std::string name = key;
    if (name.rfind("pass@", 0) == 0) name = "pass_at_" + name.substr(5);
    values.emplace_back("eval/" + opt.benchmark + "/" + name, v.as_double());
  }
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  sink->write(0, now, values);
  sink->finish(RunEnd::Finished);
}
}  // namespace

json::Value run_evaluate(EvaluateOptions opt, MPI_Comm comm, const Logger& log) {
  check_evaluate_options(opt);
  const int64_t n = opt.num_samples > 0 ? opt.num_samples : default_num_samples(opt.benchmark);
  on_rank0(comm, [&] {
    check_output_dir(opt.output, "--output");
    // A file store is a directory this run writes too (a server is reached only at the end, and a
    // failure there is a warning: the results are in OUTPUT).
    if (!opt.tracking.mlflow_uri.empty()) {
      const MlflowUri u = parse_mlflow_uri(opt.tracking.mlflow_uri);
      if (u.kind == MlflowUri::Kind::File) check_output_dir(u.location, "--mlflow-uri");
    }
  });
  const std::vector<BenchTask> tasks = agreed(comm,
                                              [&] { return load_benchmark(opt.benchmark, opt.data, opt.max_tasks); });
  const Sandbox box = agreed(comm,
                             [&] { return Sandbox(opt.limits, !opt.allow_unisolated && opt.benchmark != "gsm8k"); });
  if (opt.benchmark != "gsm8k") {
    if (box.isolated()) log.info("%s", box.describe().c_str());
    else
      log.warn("%s", box.describe().c_str());
    const std::string named = opt.python;
    opt.python = resolve_interpreter(named);
    if (opt.python != named) log.info("--python %s runs %s", named.c_str(), opt.python.c_str());
    agreed(comm, [&] { check_interpreter(box, opt.python); });
  }
  Tokenizer tok = agreed(comm, [&] { return Tokenizer::load(opt.tokenizer); });
  // Every checkpoint before the first forward: a bad second one must not end the run after the first.
  const std::vector<std::string> notes = agreed(comm, [&] {
    std::vector<std::string> all;
    for (const auto& c : opt.checkpoints)
      for (auto& note : check_generation_model(c, opt.lora, tok, opt.max_new_tokens, opt.speculative))
        all.push_back(std::move(note));
    return all;
  });
  for (const auto& note : notes) log.warn("%s", note.c_str());
  const int rank = comm_rank(comm), world = comm_size(comm);
  const std::vector<std::string> names = run_names(opt.checkpoints);
  on_rank0(comm, [&] { prepare_result_dirs(opt.output, names, log); });
  json::Value all = json::Value::array();
  log.info("%s: %zu tasks, %lld samples each, %zu checkpoint(s)", opt.benchmark.c_str(), tasks.size(),
           static_cast<long long>(n), opt.checkpoints.size());
  for (size_t ci = 0; ci < names.size(); ++ci)
    log.info("  %s -> %s", opt.checkpoints[ci].c_str(), (fs::path(opt.output) / names[ci]).c_str());
  for (size_t ci = 0; ci < opt.checkpoints.size(); ++ci) {
    GenerationModel gm = agreed(comm, [&] {
      return load_generation_model(opt.checkpoints[ci], opt.lora, opt.dtype, opt.device);
    });
    Generator gen = make_generator(gm, tok, opt.max_new_tokens, {opt.temperature, opt.top_p}, opt.speculative, opt.seed,
                                   opt.batch_size);
    if (opt.benchmark == "humaneval")  // generation may stop where scoring cuts anyway
      gen.stop = {"\nclass ", "\ndef ", "\n#", "\nif __name__", "\nprint(", "\nassert ", "\n\"\"\"", "\n'''"};
    std::vector<std::string> prompts;
    for (const BenchTask& t : tasks) prompts.push_back(t.prompt);
    warn_over_context(comm, log, gen, count_over_context(comm, gen, prompts), tasks.size(), "tasks' prompts",
                      [&](int64_t i) { return "task " + tasks[static_cast<size_t>(i)].id; });
    DecodeStats stats = empty_stats(opt.speculative);
    double seconds = 0.0;
    std::vector<std::string> mine;
    agreed(comm, [&] {
      for (size_t i = static_cast<size_t>(rank); i < tasks.size(); i += static_cast<size_t>(world))
        mine.push_back(json::dump(evaluate_task(gen, opt, opt.benchmark, tasks[i], i, n, box, stats, seconds)));
    });
    const std::vector<std::string> records = gather_round_robin(comm, mine, tasks.size());
    const DecodeStats total = sum_stats(comm, stats);
    // The slowest rank's time in generation (scoring excluded): the figure speculative decoding changes.
    seconds = all_max(comm, seconds);
    json::Value sum = agreed(comm, [&] {
      if (rank != 0) return json::Value();
      const fs::path dir = fs::path(opt.output) / names[ci];
      json::Value s = write_results(opt, opt.benchmark, opt.checkpoints[ci], dir, records, n, total, seconds);
      track_summary(opt, dir, s, world, log);
      return s;
    });
    if (rank == 0) {
      std::string line = names[ci] + ":";
      for (const auto& kv : sum.as_object())
        if (kv.first.rfind("pass@", 0) == 0) line += " " + kv.first + " " + std::to_string(kv.second.as_double());
      line += " (tokens per forward " + std::to_string(sum.at("tokens_per_forward").as_double()) + ", generation " +
              std::to_string(sum.at("generate_seconds").as_double()) + " s)";
      if (sum.at("tasks_cut_by_context").as_int() > 0)
        line += "; " + std::to_string(sum.at("tasks_cut_by_context").as_int()) +
                " task(s) cut by the model's context (max_seq_len)";
      log.info("%s", line.c_str());
      all.push(std::move(sum));
    }
  }
  on_rank0(comm,
           [&] { write_file_atomically((fs::path(opt.output) / "summary.json").string(), json::dump(all) + "\n"); });
  return all;
}

}  // namespace wmtp
