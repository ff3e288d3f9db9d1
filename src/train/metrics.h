// Metrics: one record per log interval, printed by rank 0 as a progress line and appended to
// <run_dir>/metrics.jsonl (append mode, one write(2) per line, so a requeued job continues the same
// file; readers deduplicate by "step", last one wins). metrics.jsonl is the source of truth: a
// record that cannot be written (a full disk) is an error every rank agrees on, as for a
// checkpoint (exit 1), and the file is left ending with its last complete record. Keys follow weighted_mtp's names
// (train/loss, train/grad_norm, train/learning_rate, ...) plus perf/* and system/* figures.
// Values are plain doubles; everything is reduced across ranks before it gets here. Rank 0 hands
// every record to one more sink as well: the TensorBoard/MLflow fan-out (track/fanout.h).
#pragma once
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/durable_file.h"
#include "core/timer.h"  // format_duration
#include "track/metrics_sink.h"

namespace wmtp {

class MetricsRecord {
 public:
  MetricsRecord& set(const std::string& key, double value);
  double get(const std::string& key, double fallback = 0.0) const;
  bool has(const std::string& key) const;
  const std::vector<std::pair<std::string, double>>& values() const { return values_; }

 private:
  std::vector<std::pair<std::string, double>> values_;  // insertion order
};

class MetricsLog {
 public:
  // Only `writer` (rank 0) writes. The file (and run_dir) is created at the first write, so a run
  // that fails during start-up leaves nothing behind; check run_dir at start-up with
  // check_output_dir (core/output_path.h). A file that ends mid-line (a run killed mid-write) is
  // continued on a fresh line. `comm`: the ranks that call write() together (MPI_COMM_NULL: this
  // process alone).
  MetricsLog(const std::string& run_dir, bool writer, MPI_Comm comm = MPI_COMM_NULL);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Collective over `comm`. Appends {"step": s, "time": unix seconds, <keys>} as one JSON line,
  // then hands the record (same step and time) to the sink. A failed write is an agreed
  // Error(Runtime) naming the file, on every rank; nothing of the record stays in the file.
  void write(int64_t step, const MetricsRecord& rec);
  const std::string& path() const { return path_; }

  // Where records go besides metrics.jsonl (the writer only; nullptr = nowhere).
  void set_sink(std::unique_ptr<MetricsSink> sink);
  // The end of this invocation for the sink (flush, deliver, MLflow run status). The destructor
  // says RunEnd::Failed when finish() was not called (an error unwound the trainer).
  void finish(RunEnd end);

 private:
  std::string path_;
  bool writer_ = false;
  MPI_Comm comm_;
  std::unique_ptr<AppendFile> file_;
  std::unique_ptr<MetricsSink> sink_;
};

// "step 12/200 | epoch 0.06 | loss 2.3142 | lr 1.2e-04 | grad 0.84 | 5.1k tok/s | mfu 31.2% | mem 1.20 GiB | eta 3m12s"
// mem: the largest host RSS over ranks, or on a GPU the caching allocator's peak allocation
// ("mem 23.56 GiB (GPU peak)", system/gpu_mem_peak_allocated_gib).
std::string format_progress(int64_t step, int64_t total_steps, const MetricsRecord& rec);
// "val/loss 2.3142, val/loss_head_0 2.1001, ..." (every key, insertion order).
std::string format_metrics(const MetricsRecord& rec);

}  // namespace wmtp
