// evaluate: generate, score in the sandbox, pass@k per task and averaged, files on rank 0.
#include "eval/evaluate.h"

#include <chrono>
#include <filesystem>
#include <map>
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
#include "eval/pass_at_k.h"
#include "track/fanout.h"
#include "track/run_info.h"

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

// Directory names for the checkpoints: file stems, made unique.
std::vector<std::string> run_names(const std::vector<std::string>& paths) {
  std::vector<std::string> names;
  std::map<std::string, int> seen;
  for (const auto& p : paths) {
    std::string n = fs::path(p).stem().string();
    const int dup = seen[n]++;
    if (dup > 0) n.append(1, '_').append(std::to_string(dup));
    names.push_back(n);
  }
  return names;
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
  const std::vector<Completion> done = gen.complete_all(std::vector<std::string>(keys.size(), task.prompt), keys, &stats);
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
    acc.push(stats.drafted[k] > 0 ? static_cast<double>(stats.accepted[k]) / static_cast<double>(stats.drafted[k]) : 0.0);
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
  std::unique_ptr<MetricsSink> sink = make_tracking_sinks(opt.tracking, RunInfo{dir.string(), "evaluate", world, 0, ""}, log);
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

json::Value run_evaluate(const EvaluateOptions& opt, MPI_Comm comm, const Logger& log) {
  if (opt.benchmark.empty() || opt.data.empty() || opt.checkpoints.empty() || opt.tokenizer.empty() || opt.output.empty())
    throw_usage("evaluate needs --benchmark, --data, --checkpoint, --tokenizer and --output");
  const int64_t n = opt.num_samples > 0 ? opt.num_samples : default_num_samples(opt.benchmark);
  if (opt.batch_size < 1) throw_usage("--batch-size must be at least 1");
  on_rank0(comm, [&] { check_output_dir(opt.output, "--output"); });
  const std::vector<BenchTask> tasks = agreed(comm, [&] { return load_benchmark(opt.benchmark, opt.data, opt.max_tasks); });
  const Sandbox box = agreed(comm, [&] { return Sandbox(opt.limits, !opt.allow_unisolated && opt.benchmark != "gsm8k"); });
  if (opt.benchmark != "gsm8k") {
    if (box.isolated()) log.info("%s", box.describe().c_str());
    else log.warn("%s", box.describe().c_str());
  }
  Tokenizer tok = agreed(comm, [&] { return Tokenizer::load(opt.tokenizer); });
  const int rank = comm_rank(comm), world = comm_size(comm);
  const std::vector<std::string> names = run_names(opt.checkpoints);
  json::Value all = json::Value::array();
  log.info("%s: %zu tasks, %lld samples each, %zu checkpoint(s)", opt.benchmark.c_str(), tasks.size(),
           static_cast<long long>(n), opt.checkpoints.size());
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
  on_rank0(comm, [&] { write_file_atomically((fs::path(opt.output) / "summary.json").string(), json::dump(all) + "\n"); });
  return all;
}

}  // namespace wmtp
