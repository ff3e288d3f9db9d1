// MlflowRunLink and <run_dir>/mlflow.json (see mlflow_run.h).
#include "track/mlflow_run.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/json.h"

namespace wmtp {

namespace {

constexpr size_t kMaxParamValueBytes = 500;  // MLflow 1.x's limit (2.x allows 6000): fits every server

std::string record_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "mlflow.json").string();
}

// The records of mlflow.json, each checked to hold the three strings. A file that is not that (a
// crash of an old version mid-write, an edit) is an input error naming it and the way out, never
// silently replaced: it is the one link to an MLflow run that may hold months of points.
json::Value read_records(const std::string& run_dir) {
  const std::string path = record_path(run_dir);
  std::ifstream in(path);
  if (!in) return json::Value::array();
  std::ostringstream os;
  os << in.rdbuf();
  try {
    const json::Value doc = json::parse(os.str());
    const json::Value* runs = doc.is_object() ? doc.find("runs") : nullptr;
    if (!runs || !runs->is_array()) throw_input("no \"runs\" list");
    for (const json::Value& r : runs->as_array())
      for (const char* key : {"tracking_uri", "experiment_id", "run_id"})
        if (!r.is_object() || !r.find(key) || !r.at(key).is_string())
          throw_input("a record without the string \"", key, "\"");
    return *runs;
  } catch (const Error& e) {
    throw_input("the MLflow run record '", path, "' is corrupt (", e.what(), "): move it aside (mv ", path, " ", path,
                ".bad) to start a new MLflow run for this run directory");
  }
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

MlflowRunRecord read_mlflow_record(const std::string& run_dir, const std::string& tracking_uri) {
  const json::Value records = read_records(run_dir);
  for (const json::Value& r : records.as_array())
    if (r.at("tracking_uri").as_string() == tracking_uri)
      return {tracking_uri, r.at("experiment_id").as_string(), r.at("run_id").as_string()};
  return {};
}

void write_mlflow_record(const std::string& run_dir, const MlflowRunRecord& rec) {
  json::Value runs = json::Value::array();
  const json::Value records = read_records(run_dir);
  for (const json::Value& r : records.as_array())
    if (r.at("tracking_uri").as_string() != rec.tracking_uri) runs.push(r);
  json::Value r = json::Value::object();
  r.set("tracking_uri", json::Value(rec.tracking_uri));
  r.set("experiment_id", json::Value(rec.experiment_id));
  r.set("run_id", json::Value(rec.run_id));
  runs.push(std::move(r));
  json::Value doc = json::Value::object();
  doc.set("runs", std::move(runs));
  try {
    write_file_atomically(record_path(run_dir), json::dump(doc) + "\n");
  } catch (const Error& e) {
    throw MlflowError(e.what(), /*transient=*/true);
  }
}

MlflowRunLink::MlflowRunLink(MlflowStore& store, RunRecord info, std::string experiment, Use use)
    : store_(store), info_(std::move(info)), experiment_(std::move(experiment)), use_(use) {}

void MlflowRunLink::open() {
  if (opened_) return;
  // Each step below is done once; a failed call resumes at the step that failed.
  if (!resolved_) {
    params_ = flatten_config(info_.config_toml, "the run's configuration");
    for (auto& [k, v] : params_)
      if (v.size() > kMaxParamValueBytes) v = v.substr(0, kMaxParamValueBytes - 3) + "...";
    tags_ = run_tags(info_);
    const MlflowRunRecord rec = (use_ == Use::Sync || info_.start_step > 0)
                                    ? read_mlflow_record(info_.run_dir, store_.describe())
                                    : MlflowRunRecord{};
    if (!rec.run_id.empty()) {
      if (std::optional<MlflowPairs> held = store_.run_params(rec.run_id)) {
        run_id_ = rec.run_id;
        continued_ = recorded_ = true;
        // Params cannot change: new keys are logged, changed values are kept as tags.
        std::map<std::string, std::string> old(held->begin(), held->end());
        StringPairs fresh;
        for (const auto& [k, v] : params_) {
          auto it = old.find(k);
          if (it == old.end()) fresh.emplace_back(k, v);
          else if (it->second != v)
            tags_.emplace_back("wmtp.changed_param." + k, v + " (from step " + std::to_string(info_.start_step) + ")");
        }
        params_ = std::move(fresh);
      }
    }
    resolved_ = true;
  }
  if (run_id_.empty()) {
    experiment_id_ = store_.get_or_create_experiment(experiment_);
    run_id_ = store_.create_run(experiment_id_, run_display_name(info_.run_dir), now_ms(), tags_);
  }
  if (!recorded_) {
    write_mlflow_record(info_.run_dir, {store_.describe(), experiment_id_, run_id_});
    recorded_ = true;
  }
  if (continued_ && use_ == Use::Training && !marked_running_) {
    store_.update_run(run_id_, MlflowRunStatus::Running, 0);
    marked_running_ = true;
  }
  store_.log_batch(run_id_, {}, params_, tags_);
  opened_ = true;
}

void MlflowRunLink::load_state(const std::string& key) {
  const bool known = use_ == Use::Training ? highest_.count(key) > 0 : steps_.count(key) > 0;
  if (known && !stale_.count(key)) return;
  std::vector<int64_t> held;
  if (continued_ || stale_.count(key)) held = store_.metric_steps(run_id_, key);
  if (use_ == Use::Training) {
    int64_t hi = std::numeric_limits<int64_t>::min();
    for (int64_t s : held) hi = std::max(hi, s);
    highest_[key] = hi;
  } else {
    steps_[key] = std::set<int64_t>(held.begin(), held.end());
  }
  stale_.erase(key);
}

bool MlflowRunLink::holds(const MlflowMetric& m) const {
  if (use_ == Use::Training) return m.step <= highest_.at(m.key);
  return steps_.at(m.key).count(m.step) > 0;
}

size_t MlflowRunLink::log(const std::vector<MlflowMetric>& points) {
  open();
  std::vector<MlflowMetric> send;
  std::set<std::pair<std::string, int64_t>> in_batch;
  for (const MlflowMetric& m : points) {
    load_state(m.key);
    if (!holds(m) && in_batch.insert({m.key, m.step}).second) send.push_back(m);
  }
  if (send.empty()) return 0;
  try {
    store_.log_batch(run_id_, send, {}, {});
  } catch (const MlflowError& e) {
    if (!e.unprocessed())  // a store may have written part of the batch before failing
      for (const MlflowMetric& m : send) stale_.insert(m.key);
    throw;
  } catch (...) {
    for (const MlflowMetric& m : send) stale_.insert(m.key);
    throw;
  }
  for (const MlflowMetric& m : send) {
    if (use_ == Use::Training) highest_[m.key] = std::max(highest_[m.key], m.step);
    else
      steps_[m.key].insert(m.step);
  }
  return send.size();
}

void MlflowRunLink::close(MlflowRunStatus status, int64_t end_ms) {
  open();
  store_.update_run(run_id_, status, end_ms > 0 ? end_ms : now_ms());
}

}  // namespace wmtp
