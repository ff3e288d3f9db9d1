// The one sink MetricsLog writes to: every configured tracking backend of [logging] (TensorBoard,
// MLflow), each guarded so that its failure is one warning and that backend is off for the rest of
// the run; metrics.jsonl, written before, stays the source of truth.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "track/metrics_sink.h"
#include "track/run_record.h"
#include "track/tracking_config.h"

namespace wmtp {

class TrackingFanout : public MetricsSink {
 public:
  // `kept_note`: where every point is kept (points_kept_note), said when a backend turns off.
  explicit TrackingFanout(Logger log, std::string kept_note = "")
      : log_(std::move(log)), kept_note_(std::move(kept_note)) {}
  void add(std::string name, std::unique_ptr<MetricsSink> sink);
  bool empty() const { return sinks_.empty(); }
  void write(int64_t step, double unix_time, const MetricValues& values) override;
  void finish(RunEnd end) override;

 private:
  void disable(size_t i, const std::exception& e);
  Logger log_;
  std::string kept_note_;
  std::vector<std::pair<std::string, std::unique_ptr<MetricsSink>>> sinks_;
};

// Rank 0's sinks for `info` (TensorBoard in <run_dir>/tensorboard, MLflow at cfg.mlflow_uri);
// nullptr when none is configured. A backend that cannot start is a warning, not an error.
// `stop_requested`: whether a stop signal came (it cuts MLflow's end-of-run wait short).
std::unique_ptr<MetricsSink> make_tracking_sinks(const TrackingConfig& cfg, const RunRecord& info, const Logger& log,
                                                 std::function<bool()> stop_requested = {});

}  // namespace wmtp
