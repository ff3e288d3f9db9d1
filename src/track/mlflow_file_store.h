// MLflow's file store (the layout of mlflow/store/tracking/file_store.py), written directly:
//   <root>/<experiment_id>/meta.yaml                      experiment: name, artifact_location, ...
//   <root>/<experiment_id>/<run_id>/meta.yaml             run info: run_name, status, start/end time, ...
//   <root>/<experiment_id>/<run_id>/metrics/<key>         one line per point: "<timestamp ms> <value> <step>"
//   <root>/<experiment_id>/<run_id>/params/<key>          the value, no newline
//   <root>/<experiment_id>/<run_id>/tags/<key>            the value, no newline
// A new root gets the "Default" experiment 0 and .trash, as MLflow creates them. Keys containing
// '/' (train/loss) become subdirectories, as in MLflow. One writer per run is assumed.
#pragma once
#include "track/mlflow_store.h"

namespace wmtp {

class MlflowFileStore : public MlflowStore {
 public:
  explicit MlflowFileStore(std::string root);  // an absolute directory
  std::string describe() const override { return "file://" + root_; }

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
  void ensure_root();
  std::string find_run_dir(const std::string& run_id) const;  // "" when missing

  std::string root_;
};

}  // namespace wmtp
