// Live MLflow logging from the training loop: points are queued (DeliveryQueue) and a background
// thread opens the run (MlflowRunLink: continued after a resume), sends them and, at the end, sets
// the run's status (FINISHED; KILLED when stopped to be resumed; FAILED on an error). A server that
// is down, slow or refusing never slows or stops training; finish() waits at most `timeout_sec`,
// at most kStopGraceSec once a stop signal is seen (opt.stop_requested).
#pragma once
#include <memory>

#include "core/log.h"
#include "track/delivery_queue.h"
#include "track/metrics_sink.h"
#include "track/run_record.h"
#include "track/tracking_config.h"

namespace wmtp {

class MlflowSink : public MetricsSink {
 public:
  MlflowSink(const TrackingConfig& cfg, const RunRecord& info, const Logger& log, DeliveryOptions opt = {});
  void write(int64_t step, double unix_time, const MetricValues& values) override;
  void finish(RunEnd end) override;
  DeliveryQueue::Summary summary() const { return summary_; }

 private:
  double timeout_sec_;
  std::unique_ptr<DeliveryQueue> queue_;
  DeliveryQueue::Summary summary_;
};

MlflowRunStatus mlflow_status_for(RunEnd end);
// One metrics record as MLflow points: finite values only (JSON has no NaN), timestamp in ms.
std::vector<MlflowMetric> mlflow_points(int64_t step, double unix_time, const MetricValues& values);

}  // namespace wmtp
