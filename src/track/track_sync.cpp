// track-sync's replay (see track_sync.h).
#include "track/track_sync.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/json.h"
#include "track/mlflow_run.h"
#include "track/mlflow_sink.h"
#include "track/tb_event.h"
#include "track/tensorboard_sink.h"
#include "track/tfrecord.h"

namespace fs = std::filesystem;

namespace wmtp {

namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input("cannot read ", what, " '", path, "'");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

struct RunFiles {
  std::string config_toml;
  std::vector<MetricsRow> rows;
  size_t points = 0;
  double last_time = 0;      // the last record's time
  bool reached_end = false;  // the last training record has perf/eta_sec 0: the run's last step
};

// A sync is a command someone waits for: transient failures (a busy server) are retried a few
// times with backoff; MlflowRunLink re-reads what a failed request may have written.
template <class F>
auto with_retries(F&& f) {
  for (int attempt = 0;; ++attempt) {
    try {
      return f();
    } catch (const MlflowError& e) {
      if (!e.transient() || attempt == 8) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(250 << std::min(attempt, 4)));
    }
  }
}

RunFiles read_run(const std::string& run_dir, std::vector<std::string>* warnings) {
  RunFiles r;
  r.config_toml = read_file((fs::path(run_dir) / "config.toml").string(), "the run's config");
  r.rows = read_metrics_history((fs::path(run_dir) / "metrics.jsonl").string(), warnings);
  for (const MetricsRow& row : r.rows) {
    r.points += row.values.size();
    r.last_time = std::max(r.last_time, row.time);
    for (const auto& [k, v] : row.values)
      if (k == "perf/eta_sec") r.reached_end = v == 0;
  }
  return r;
}

}  // namespace

std::vector<MetricsRow> read_metrics_history(const std::string& path, std::vector<std::string>* warnings) {
  const std::string text = read_file(path, "metrics file");
  std::vector<MetricsRow> rows;
  std::map<std::pair<std::string, int64_t>, std::pair<size_t, size_t>> where;  // (key, step) -> (row, index)
  size_t start = 0;
  for (int line_no = 1; start < text.size(); ++line_no) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json::Value rec;
    try {
      rec = json::parse(line);
    } catch (const Error& e) {
      const size_t tail = line.find_last_not_of(" \t\r");
      if (line[line.find_first_not_of(" \t\r")] == '{' && line[tail] != '}') {
        if (warnings)
          warnings->push_back(path + ":" + std::to_string(line_no) +
                              ": a torn record (its writer was killed or ran out of disk mid-line): skipped");
        continue;
      }
      throw_input(path, ":", line_no, ": not a metrics record (", e.what(), ")");
    }
    if (!rec.is_object() || !rec.find("step") || !rec.find("time") || !rec.at("step").is_number() ||
        !rec.at("time").is_number())
      throw_input(path, ":", line_no, ": a metrics record needs the numbers \"step\" and \"time\"");
    MetricsRow row;
    row.step = rec.at("step").as_int();
    row.time = rec.at("time").as_double();
    for (const auto& [k, v] : rec.as_object())
      if (k != "step" && k != "time" && v.is_number()) row.values.emplace_back(k, v.as_double());
    const size_t r = rows.size();
    for (size_t i = 0; i < row.values.size(); ++i) {
      auto key = std::make_pair(row.values[i].first, row.step);
      auto it = where.find(key);
      if (it != where.end()) rows[it->second.first].values[it->second.second].first.clear();  // replaced later
      where[key] = {r, i};
    }
    rows.push_back(std::move(row));
  }
  for (MetricsRow& row : rows)
    row.values.erase(std::remove_if(row.values.begin(), row.values.end(),
                                    [](const auto& kv) { return kv.first.empty(); }),
                     row.values.end());
  rows.erase(std::remove_if(rows.begin(), rows.end(), [](const MetricsRow& r) { return r.values.empty(); }),
             rows.end());
  return rows;
}

std::string infer_program(const std::string& config_toml) {
  for (const char* p : {"critic", "rho1", "verifiable"})
    if (config_toml.find(std::string("\n[") + p + "]") != std::string::npos ||
        config_toml.rfind(std::string("[") + p + "]", 0) == 0)
      return std::string("train-") + p;
  return "train-baseline";
}

SyncResult sync_to_mlflow(const std::string& run_dir, const std::string& uri, const std::string& experiment,
                          double timeout_sec, bool training_ended) {
  SyncResult res;
  const RunFiles run = read_run(run_dir, &res.warnings);
  std::unique_ptr<MlflowStore> store = open_mlflow_store(uri, timeout_sec);
  RunRecord info{run_dir,           infer_program(run.config_toml), /*world_size=*/0, /*start_step=*/0, run.config_toml,
                 /*points_file=*/""};
  MlflowRunLink link(*store, info, experiment, MlflowRunLink::Use::Sync);
  with_retries([&] { link.open(); });
  res.points = run.points;
  std::vector<MlflowMetric> points;
  for (const MetricsRow& row : run.rows) {
    std::vector<MlflowMetric> p = mlflow_points(row.step, row.time, row.values);
    points.insert(points.end(), p.begin(), p.end());
    if (points.size() >= 5000) {
      res.sent += with_retries([&] { return link.log(points); });
      points.clear();
    }
  }
  res.sent += with_retries([&] { return link.log(points); });
  if (!link.continued()) {
    with_retries([&] { link.close(MlflowRunStatus::Finished); });  // created here: nothing else ends it
  } else if (training_ended &&
             with_retries([&] { return store->run_status(link.run_id()); }) == MlflowRunStatus::Running) {
    const MlflowRunStatus end = run.reached_end ? MlflowRunStatus::Finished : MlflowRunStatus::Killed;
    with_retries([&] { link.close(end, std::llround(run.last_time * 1000.0)); });
    res.ended = mlflow_status_name(end);
  }
  res.where = link.run_id();
  return res;
}

SyncResult sync_to_tensorboard(const std::string& run_dir, const std::string& tensorboard_dir) {
  SyncResult res;
  const RunFiles run = read_run(run_dir, &res.warnings);
  const fs::path dir = fs::path(tensorboard_dir) / run_display_name(run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_input("cannot create the TensorBoard directory '", dir.string(), "': ", ec.message());
  const double t0 = run.rows.empty() ? 0.0 : run.rows.front().time;
  const std::string final_path = (dir / ("events.out.tfevents." + std::to_string(int64_t(t0)) + ".wmtp-sync")).string();
  // Written under a name without "tfevents" (TensorBoard would read a half-written file), then renamed.
  const std::string tmp = (dir / ".wmtp-sync-partial").string();
  fs::remove(tmp, ec);
  res.points = run.points;
  {
    TfRecordWriter w(tmp);
    w.write(encode_file_version_event(t0));
    w.write(encode_text_event(t0, 0, "config", config_markdown(run.config_toml)));
    for (const MetricsRow& row : run.rows) {
      MetricValues finite;
      for (const auto& kv : row.values)
        if (std::isfinite(kv.second)) finite.push_back(kv);
      w.write(encode_scalars_event(row.time, row.step, finite));
      res.sent += finite.size();
    }
    w.flush();
  }
  commit_file(tmp, final_path);
  res.where = final_path;
  return res;
}

}  // namespace wmtp
