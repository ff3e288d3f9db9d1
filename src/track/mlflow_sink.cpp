// MlflowSink: the deliverer that runs on the queue's thread (see mlflow_sink.h).
#include "track/mlflow_sink.h"

#include <cmath>

#include "track/mlflow_run.h"

namespace wmtp {

namespace {

class MlflowDeliverer : public PointDeliverer {
 public:
  MlflowDeliverer(std::unique_ptr<MlflowStore> store, const TrackingConfig& cfg, const RunRecord& info, Logger log)
      : store_(std::move(store)),
        link_(*store_, info, cfg.mlflow_experiment, MlflowRunLink::Use::Training),
        log_(std::move(log)) {}

  void deliver(const std::vector<MlflowMetric>& batch) override {
    open();
    link_.log(batch);
  }
  void close(RunEnd end) override {
    open();
    link_.close(mlflow_status_for(end));
  }
  void bind_cancel(const std::atomic<bool>* cancel) override { store_->set_cancel(cancel); }

 private:
  void open() {
    if (announced_) return;
    link_.open();
    announced_ = true;
    log_.info("MLflow: %s run %s at %s", link_.continued() ? "continuing" : "logging to", link_.run_id().c_str(),
              store_->describe().c_str());
  }

  std::unique_ptr<MlflowStore> store_;
  MlflowRunLink link_;
  Logger log_;
  bool announced_ = false;
};

}  // namespace

MlflowRunStatus mlflow_status_for(RunEnd end) {
  switch (end) {
    case RunEnd::Finished: return MlflowRunStatus::Finished;
    case RunEnd::Stopped: return MlflowRunStatus::Killed;
    case RunEnd::Failed: return MlflowRunStatus::Failed;
  }
  return MlflowRunStatus::Failed;
}

MlflowSink::MlflowSink(const TrackingConfig& cfg, const RunRecord& info, const Logger& log, DeliveryOptions opt)
    : timeout_sec_(cfg.mlflow_timeout_sec) {
  auto store = open_mlflow_store(cfg.mlflow_uri, cfg.mlflow_timeout_sec);
  const std::string what = "MLflow " + store->describe();
  queue_ = std::make_unique<DeliveryQueue>(std::make_unique<MlflowDeliverer>(std::move(store), cfg, info, log), what,
                                           log, opt);
}

std::vector<MlflowMetric> mlflow_points(int64_t step, double unix_time, const MetricValues& values) {
  std::vector<MlflowMetric> points;
  const int64_t ms = std::llround(unix_time * 1000.0);
  for (const auto& [k, v] : values)
    if (std::isfinite(v)) points.push_back({k, v, ms, step});
  return points;
}

void MlflowSink::write(int64_t step, double unix_time, const MetricValues& values) {
  queue_->push(mlflow_points(step, unix_time, values));
}

void MlflowSink::finish(RunEnd end) { summary_ = queue_->finish(end, timeout_sec_); }

}  // namespace wmtp
