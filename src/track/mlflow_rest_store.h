// MLflow's REST API 2.0 (a tracking server at http(s)://host:port[/prefix]): the endpoints
// experiments/get-by-name and /create, runs/create, /get, /log-batch, /update and
// metrics/get-history. Request limits of runs/log-batch (1000 metrics, 100 params, 100 tags per
// request) are respected by splitting. HTTP 429/5xx and transfer failures are transient errors
// (a GET is retried here a few times first), other non-2xx answers carry MLflow's error_code.
#pragma once
#include <memory>

#include "track/http_client.h"
#include "track/mlflow_store.h"

namespace wmtp {

namespace json {
class Value;
}

class MlflowRestStore : public MlflowStore {
 public:
  MlflowRestStore(std::string base_url, double timeout_sec);
  std::string describe() const override { return base_; }

  std::string get_or_create_experiment(const std::string& name) override;
  std::string create_run(const std::string& experiment_id, const std::string& run_name, int64_t start_ms,
                         const MlflowPairs& tags) override;
  std::optional<MlflowPairs> run_params(const std::string& run_id) override;
  void log_batch(const std::string& run_id, const std::vector<MlflowMetric>& metrics, const MlflowPairs& params,
                 const MlflowPairs& tags) override;
  void update_run(const std::string& run_id, MlflowRunStatus status, int64_t end_ms) override;
  MlflowRunStatus run_status(const std::string& run_id) override;
  std::vector<int64_t> metric_steps(const std::string& run_id, const std::string& key) override;

 private:
  json::Value call(const std::string& endpoint, const json::Value* body, const std::string& query = "");
  json::Value call_once(const std::string& endpoint, const json::Value* body, const std::string& query);

  std::string base_;
  HttpClient http_;
};

}  // namespace wmtp
