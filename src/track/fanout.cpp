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
  log_.warn("%s: %s; it is off for the rest of this run%s", sinks_[i].first.c_str(), e.what(),
            kept_note_.empty() ? "" : (" (" + kept_note_ + ")").c_str());
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

std::unique_ptr<MetricsSink> make_tracking_sinks(const TrackingConfig& cfg, const RunRecord& info, const Logger& log,
                                                 std::function<bool()> stop_requested) {
  const std::string kept = points_kept_note(info);
  const auto in_parens = [](const std::string& note) { return note.empty() ? note : " (" + note + ")"; };
  auto fan = std::make_unique<TrackingFanout>(log, kept);
  if (cfg.tensorboard) {
    const std::string dir = (std::filesystem::path(info.run_dir) / "tensorboard").string();
    try {
      auto tb = std::make_unique<TensorBoardSink>(dir, info.config_toml, info.start_step);
      log.info("TensorBoard: %s (tensorboard --logdir %s)", tb->path().c_str(), dir.c_str());
      fan->add("TensorBoard " + dir, std::move(tb));
    } catch (const std::exception& e) {
      log.warn("TensorBoard: %s; no event file for this run%s", e.what(), in_parens(kept).c_str());
    }
  }
  if (!cfg.mlflow_uri.empty()) {
    const std::string uri = redact_uri(cfg.mlflow_uri);  // validate() refuses credentials; never print them anyway
    try {
      DeliveryOptions opt;
      opt.stop_requested = std::move(stop_requested);
      opt.kept_note = points_kept_note(info, uri);
      fan->add("MLflow " + uri, std::make_unique<MlflowSink>(cfg, info, log, opt));
    } catch (const std::exception& e) {
      log.warn("MLflow %s: %s; not logging to MLflow%s", uri.c_str(), e.what(),
               in_parens(points_kept_note(info, uri)).c_str());
    }
  }
  if (fan->empty()) return nullptr;
  return fan;
}

}  // namespace wmtp
