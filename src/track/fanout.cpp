// TrackingFanout and the sinks a training run starts with (see fanout.h).
#include "track/fanout.h"

#include <filesystem>

#include "track/mlflow_sink.h"
#include "track/tensorboard_sink.h"

namespace wmtp {

void TrackingFanout::add(std::string name, std::unique_ptr<MetricsSink> sink) {
  sinks_.emplace_back(std::move(name), std::move(sink));
}

void TrackingFanout::disable(size_t i, const std::exception& e) {
  log_.warn("%s: %s; it is off for the rest of this run (metrics.jsonl has every point)", sinks_[i].first.c_str(),
            e.what());
  sinks_.erase(sinks_.begin() + long(i));
}

void TrackingFanout::write(int64_t step, double unix_time, const MetricValues& values) {
  for (size_t i = 0; i < sinks_.size();) {
    try {
      sinks_[i].second->write(step, unix_time, values);
      ++i;
    } catch (const std::exception& e) {
      disable(i, e);
    }
  }
}

void TrackingFanout::finish(RunEnd end) {
  for (size_t i = 0; i < sinks_.size();) {
    try {
      sinks_[i].second->finish(end);
      ++i;
    } catch (const std::exception& e) {
      disable(i, e);
    }
  }
}

std::unique_ptr<MetricsSink> make_tracking_sinks(const TrackingConfig& cfg, const RunInfo& info, const Logger& log,
                                                 std::function<bool()> stop_requested) {
  auto fan = std::make_unique<TrackingFanout>(log);
  if (cfg.tensorboard) {
    const std::string dir = (std::filesystem::path(info.run_dir) / "tensorboard").string();
    try {
      auto tb = std::make_unique<TensorBoardSink>(dir, info.config_toml, info.start_step);
      log.info("TensorBoard: %s (tensorboard --logdir %s)", tb->path().c_str(), dir.c_str());
      fan->add("TensorBoard " + dir, std::move(tb));
    } catch (const std::exception& e) {
      log.warn("TensorBoard: %s; no event file for this run (metrics.jsonl has every point)", e.what());
    }
  }
  if (!cfg.mlflow_uri.empty()) {
    const std::string uri = redact_uri(cfg.mlflow_uri);  // validate() refuses credentials; never print them anyway
    try {
      DeliveryOptions opt;
      opt.stop_requested = std::move(stop_requested);
      fan->add("MLflow " + uri, std::make_unique<MlflowSink>(cfg, info, log, opt));
    } catch (const std::exception& e) {
      log.warn("MLflow %s: %s; not logging to MLflow (metrics.jsonl has every point)", uri.c_str(), e.what());
    }
  }
  if (fan->empty()) return nullptr;
  return fan;
}

}  // namespace wmtp
