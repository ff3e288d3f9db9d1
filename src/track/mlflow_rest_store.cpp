// MlflowRestStore: MLflow REST API 2.0 requests and answers (see mlflow_rest_store.h).
#include "track/mlflow_rest_store.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <cmath>

#include "core/json.h"

namespace wmtp {

namespace {

constexpr size_t kMaxMetricsPerBatch = 1000, kMaxParamsPerBatch = 100, kMaxTagsPerBatch = 100;

json::Value pairs_json(const MlflowPairs& pairs, size_t begin, size_t end) {
  json::Value arr = json::Value::array();
  for (size_t i = begin; i < end; ++i) {
    json::Value kv = json::Value::object();
    kv.set("key", json::Value(pairs[i].first));
    kv.set("value", json::Value(pairs[i].second));
    arr.push(std::move(kv));
  }
  return arr;
}

// int64 fields arrive as numbers or, from protobuf's JSON mapping, as strings; absent = 0.
int64_t int_field(const json::Value& obj, const char* key) {
  const json::Value* v = obj.find(key);
  if (!v) return 0;
  if (v->is_string()) return std::stoll(v->as_string());
  return v->as_int();
}

std::string string_field(const json::Value& obj, const char* key) {
  const json::Value* v = obj.find(key);
  return v && v->is_string() ? v->as_string() : "";
}

}  // namespace

MlflowRestStore::MlflowRestStore(std::string base_url, double timeout_sec)
    : base_(std::move(base_url)), http_(timeout_sec) {}

json::Value MlflowRestStore::call(const std::string& endpoint, const json::Value* body, const std::string& query) {
  // GETs change nothing: a transient failure is retried here, briefly. Writes are not (a log-batch
  // may have been written in part): MlflowRunLink re-reads the run before sending again.
  for (int attempt = 0;; ++attempt) {
    try {
      return call_once(endpoint, body, query);
    } catch (const MlflowError& e) {
      if (body || !e.transient() || attempt == 3 || (cancel_ && cancel_->load())) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
    }
  }
}

json::Value MlflowRestStore::call_once(const std::string& endpoint, const json::Value* body, const std::string& query) {
  const std::string url = base_ + "/api/2.0/mlflow/" + endpoint + (query.empty() ? "" : "?" + query);
  const HttpResponse r = body ? http_.post_json(url, json::dump(*body), cancel_) : http_.get(url, cancel_);
  const std::string where = "MLflow " + base_ + " " + endpoint;
  // Not an MLflow answer: retrying would read the same flood again.
  if (r.too_large) throw MlflowError(where + ": " + r.error + " (not an MLflow server?)", /*transient=*/false);
  if (r.status == 0) throw MlflowError(where + ": " + r.error, /*transient=*/true);
  json::Value answer;
  bool parsed = false;
  try {
    answer = json::parse(r.body);
    parsed = answer.is_object();
  } catch (const std::exception&) {
  }
  if (r.status >= 200 && r.status < 300) {
    if (!parsed)
      throw MlflowError(where + ": HTTP " + std::to_string(r.status) + " without a JSON object (not an MLflow server?)",
                        false);
    return answer;
  }
  const bool transient = r.status == 429 || r.status >= 500;
  const std::string code = parsed ? string_field(answer, "error_code") : "";
  const std::string message = parsed ? string_field(answer, "message") : r.body.substr(0, 200);
  MlflowError e(where + ": HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code) +
                    (message.empty() ? "" : ": " + message),
                transient, code);
  e.set_http_status(r.status);
  throw e;
}

std::string MlflowRestStore::get_or_create_experiment(const std::string& name) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      const json::Value r = call("experiments/get-by-name", nullptr, "experiment_name=" + HttpClient::escape(name));
      const json::Value& exp = r.at("experiment");
      if (string_field(exp, "lifecycle_stage") == "deleted")
        throw MlflowError("MLflow " + base_ + ": experiment '" + name +
                              "' is deleted (restore it, or set [logging] mlflow_experiment to another name)",
                          false, "INVALID_STATE");
      return string_field(exp, "experiment_id");
    } catch (const MlflowError& e) {
      if (e.code() != "RESOURCE_DOES_NOT_EXIST") throw;
    }
    json::Value body = json::Value::object();
    body.set("name", json::Value(name));
    try {
      return string_field(call("experiments/create", &body), "experiment_id");
    } catch (const MlflowError& e) {
      if (e.code() != "RESOURCE_ALREADY_EXISTS") throw;  // created meanwhile by another run: look it up again
    }
  }
  throw MlflowError("MLflow " + base_ + ": experiment '" + name + "' neither found nor created", true);
}

std::string MlflowRestStore::create_run(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                                        const MlflowPairs& tags) {
  json::Value body = json::Value::object();
  body.set("experiment_id", json::Value(experiment_id));
  body.set("run_name", json::Value(run_name));
  body.set("start_time", json::Value(start_ms));
  body.set("tags", pairs_json(tags, 0, std::min(tags.size(), kMaxTagsPerBatch)));
  const json::Value r = call("runs/create", &body);
  const json::Value& info = r.at("run").at("info");
  std::string id = string_field(info, "run_id");
  if (id.empty()) id = string_field(info, "run_uuid");  // servers before MLflow 1.0
  if (id.empty()) throw MlflowError("MLflow " + base_ + " runs/create: no run_id in the answer", false);
  if (tags.size() > kMaxTagsPerBatch) log_batch(id, {}, {}, MlflowPairs(tags.begin() + kMaxTagsPerBatch, tags.end()));
  return id;
}

std::optional<MlflowPairs> MlflowRestStore::run_params(const std::string& run_id) {
  json::Value r;
  try {
    r = call("runs/get", nullptr, "run_id=" + HttpClient::escape(run_id));
  } catch (const MlflowError& e) {
    if (e.code() == "RESOURCE_DOES_NOT_EXIST") return std::nullopt;
    throw;
  }
  const json::Value& run = r.at("run");
  if (string_field(run.at("info"), "lifecycle_stage") == "deleted") return std::nullopt;
  MlflowPairs params;
  if (const json::Value* data = run.find("data"))
    if (const json::Value* ps = data->find("params"))
      for (const json::Value& p : ps->as_array()) params.emplace_back(string_field(p, "key"), string_field(p, "value"));
  return params;
}

void MlflowRestStore::log_batch(const std::string& run_id, const std::vector<MlflowMetric>& metrics,
                                const MlflowPairs& params, const MlflowPairs& tags) {
  size_t done = 0;  // requests answered 200: after one, a failure leaves the batch written in part
  auto send = [&](const char* field, json::Value items) {
    json::Value body = json::Value::object();
    body.set("run_id", json::Value(run_id));
    body.set(field, std::move(items));
    try {
      call("runs/log-batch", &body);
    } catch (const MlflowError& e) {
      if (done == 0) throw;
      throw MlflowError(e.what(), e.transient());  // not "unprocessed" any more
    }
    ++done;
  };
  for (size_t i = 0; i < params.size(); i += kMaxParamsPerBatch)
    send("params", pairs_json(params, i, std::min(params.size(), i + kMaxParamsPerBatch)));
  for (size_t i = 0; i < metrics.size(); i += kMaxMetricsPerBatch) {
    json::Value arr = json::Value::array();
    for (size_t j = i; j < std::min(metrics.size(), i + kMaxMetricsPerBatch); ++j) {
      const MlflowMetric& m = metrics[j];
      if (!std::isfinite(m.value)) continue;  // JSON has no NaN/Inf
      json::Value o = json::Value::object();
      o.set("key", json::Value(m.key));
      o.set("value", json::Value(m.value));
      o.set("timestamp", json::Value(m.timestamp_ms));
      o.set("step", json::Value(m.step));
      arr.push(std::move(o));
    }
    send("metrics", std::move(arr));
  }
  for (size_t i = 0; i < tags.size(); i += kMaxTagsPerBatch)
    send("tags", pairs_json(tags, i, std::min(tags.size(), i + kMaxTagsPerBatch)));
}

void MlflowRestStore::update_run(const std::string& run_id, MlflowRunStatus status, int64_t end_ms) {
  json::Value body = json::Value::object();
  body.set("run_id", json::Value(run_id));
  body.set("status", json::Value(mlflow_status_name(status)));
  if (status != MlflowRunStatus::Running) body.set("end_time", json::Value(end_ms));
  call("runs/update", &body);
}

MlflowRunStatus MlflowRestStore::run_status(const std::string& run_id) {
  const json::Value r = call("runs/get", nullptr, "run_id=" + HttpClient::escape(run_id));
  return mlflow_status_from_name(string_field(r.at("run").at("info"), "status"));
}

std::vector<int64_t> MlflowRestStore::metric_steps(const std::string& run_id, const std::string& key) {
  std::vector<int64_t> steps;
  std::string token;
  do {
    std::string q = "run_id=" + HttpClient::escape(run_id) + "&metric_key=" + HttpClient::escape(key) +
                    "&max_results=25000";
    if (!token.empty()) q += "&page_token=" + HttpClient::escape(token);
    const json::Value r = call("metrics/get-history", nullptr, q);
    if (const json::Value* ms = r.find("metrics"))
      for (const json::Value& m : ms->as_array()) steps.push_back(int_field(m, "step"));
    token = string_field(r, "next_page_token");
  } while (!token.empty());
  return steps;
}

}  // namespace wmtp
