// Where a run's metrics go besides metrics.jsonl: TensorBoard event files and MLflow. The keys
// live in the [logging] section (LoggingConfig embeds this struct); rank 0 does all the writing.
#pragma once
#include <string>

#include "track/mlflow_store.h"

namespace wmtp {

// The most mlflow_timeout_sec (and track-sync --timeout) may be: it also bounds the end-of-run wait,
// and a job that finished must not hold its allocation much longer for a tracking server.
constexpr double kMaxMlflowTimeoutSec = 300.0;

struct TrackingConfig {
  bool tensorboard = true;
  std::string mlflow_uri;  // "" = off; file:///path (or a path) or http(s)://host:port
  std::string mlflow_experiment = "wmtp";
  double mlflow_timeout_sec = 10.0;
  template <class V>
  void visit(V& v) {
    v.field("tensorboard", tensorboard, "write TensorBoard event files to <run_dir>/tensorboard/");
    // Printed redacted (--print-config, config.toml): a URI with credentials is refused by validate(),
    // which --print-config does not wait for.
    v.field("mlflow_uri", mlflow_uri,
            "MLflow tracking: \"\" = off; file:///abs/path/mlruns (MLflow's file store, read by `mlflow ui`) or "
            "http(s)://host:port (a tracking server, REST API 2.0; MLFLOW_TRACKING_TOKEN or "
            "MLFLOW_TRACKING_USERNAME/PASSWORD from the environment)",
            redact_uri);
    v.field("mlflow_experiment", mlflow_experiment, "MLflow experiment name (created when missing)");
    v.field("mlflow_timeout_sec", mlflow_timeout_sec,
            "seconds one request to the MLflow server may take, and the most the end of a run waits for "
            "undelivered points (training never waits for the server otherwise; a stop signal ends that wait); "
            "at most 300");
  }
  void validate() const;  // throws Error(Usage) naming the key
};

}  // namespace wmtp
