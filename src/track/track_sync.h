// Upload later: a run directory's metrics.jsonl and config.toml replayed into an MLflow store or a
// TensorBoard directory, for runs whose compute nodes had no network (or whose tracking server was
// down). Idempotent: MLflow receives only the (key, step) points its run does not hold yet (the run
// recorded in <run_dir>/mlflow.json is continued, or one is created and recorded); TensorBoard gets
// one event file per run directory, <dir>/<run name>/events.out.tfevents.<t>.wmtp-sync, replaced
// whole on every sync. metrics.jsonl is read as its readers do: the last value of a (key, step) wins.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"
#include "track/metrics_sink.h"

namespace wmtp {

struct MetricsRow {
  int64_t step = 0;
  double time = 0;  // unix seconds, the record's "time"
  MetricValues values;
};
// The records of a metrics.jsonl, in file order, each keeping only the values no later record of
// the same step replaces; null values are dropped. A torn record (a writer killed or out of disk
// mid-line: a line that is not JSON and does not end in '}') is skipped, and `warnings` gets one
// line naming file:line for each (a resumed run starts on a fresh line after it). Error(Input)
// naming file:line for anything else that is not a metrics record, binary bytes included.
std::vector<MetricsRow> read_metrics_history(const std::string& path, std::vector<std::string>* warnings = nullptr);

// train-critic / train-rho1 / train-verifiable when the config has that pipeline's section, else train-baseline.
std::string infer_program(const std::string& config_toml);

struct SyncResult {
  size_t points = 0;                  // (key, step) points in metrics.jsonl
  size_t sent = 0;                    // written now (MLflow: those the run lacked)
  std::string where;                  // the MLflow run id, or the event file
  std::vector<std::string> warnings;  // torn records skipped
  std::string ended;                  // MLflow: the status this sync gave a run its training left RUNNING ("" = none)
};
// `training_ended`: no training holds the run directory (its lock is free). Then a recorded MLflow
// run still RUNNING (its training could not reach the store at the end: a full disk, a server
// down) gets its end here: FINISHED when the last training record is the run's last step
// (perf/eta_sec 0), KILLED otherwise, at the time of the last record.
SyncResult sync_to_mlflow(const std::string& run_dir, const std::string& uri, const std::string& experiment,
                          double timeout_sec, bool training_ended);
SyncResult sync_to_tensorboard(const std::string& run_dir, const std::string& tensorboard_dir);

}  // namespace wmtp
