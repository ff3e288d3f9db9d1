// MetricsLog and the progress line.
#include "train/metrics.h"

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "comm/agree.h"
#include "core/error.h"
#include "core/json.h"

namespace wmtp {

MetricsRecord& MetricsRecord::set(const std::string& key, double value) {
  for (auto& kv : values_)
    if (kv.first == key) {
      kv.second = value;
      return *this;
    }
  values_.emplace_back(key, value);
  return *this;
}

double MetricsRecord::get(const std::string& key, double fallback) const {
  for (const auto& kv : values_)
    if (kv.first == key) return kv.second;
  return fallback;
}

bool MetricsRecord::has(const std::string& key) const {
  for (const auto& kv : values_)
    if (kv.first == key) return true;
  return false;
}

MetricsLog::MetricsLog(const std::string& run_dir, bool writer, MPI_Comm comm)
    : path_((std::filesystem::path(run_dir) / "metrics.jsonl").string()), writer_(writer), comm_(comm) {}

MetricsLog::~MetricsLog() { finish(RunEnd::Failed); }

void MetricsLog::set_sink(std::unique_ptr<MetricsSink> sink) {
  if (writer_) sink_ = std::move(sink);
}

void MetricsLog::finish(RunEnd end) {
  if (!sink_) return;
  std::unique_ptr<MetricsSink> sink = std::move(sink_);  // once: later calls (the destructor) do nothing
  sink->finish(end);
}

void MetricsLog::write(int64_t step, const MetricsRecord& rec) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  agreed(comm_, [&] {
    if (!writer_) return;
    if (!file_) {  // opened at the first record: a run that fails during start-up leaves no empty file
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
      file_ = std::make_unique<AppendFile>(path_);
      // A record torn by a kill stays where it is (readers skip it); ours start on a line of their own.
      if (file_->ends_mid_line()) file_->append("\n", false);
    }
    json::Value obj = json::Value::object();
    obj.set("step", json::Value(step));
    obj.set("time", json::Value(now));
    for (const auto& [k, v] : rec.values()) obj.set(k, std::isfinite(v) ? json::Value(v) : json::Value());
    try {
      file_->append(json::dump(obj) + "\n", /*sync=*/false);
    } catch (const Error& e) {
      throw_runtime("metrics file: ", e.what(),
                    " (it ends with its last complete record; metrics.jsonl is the "
                    "run's record of its metrics, so training stops as on a checkpoint that cannot be written)");
    }
  });
  if (sink_) sink_->write(step, now, rec.values());
}

std::string format_progress(int64_t step, int64_t total, const MetricsRecord& r) {
  char buf[512];
  double tps = r.get("perf/tokens_per_sec");
  // On a GPU the memory that limits a run is the caching allocator's, not the host's RSS.
  const bool gpu = r.has("system/gpu_mem_peak_allocated_gib");
  const double mem = gpu ? r.get("system/gpu_mem_peak_allocated_gib") : r.get("system/rss_max_gib");
  snprintf(buf, sizeof(buf),
           "step %lld/%lld | epoch %.2f | loss %.4f | lr %.2e | grad %.3f | %.1fk tok/s | mfu %.1f%% | "
           "mem %.2f GiB%s | eta %s",
           (long long)step, (long long)total, r.get("train/epoch"), r.get("train/loss"), r.get("train/learning_rate"),
           r.get("train/grad_norm"), tps / 1000.0, r.get("perf/mfu_pct"), mem, gpu ? " (GPU peak)" : "",
           format_duration(r.get("perf/eta_sec", NAN)).c_str());
  return buf;
}

std::string format_metrics(const MetricsRecord& rec) {
  std::string out;
  char buf[64];
  for (const auto& [key, value] : rec.values()) {
    std::snprintf(buf, sizeof buf, "%.4f", value);
    out += (out.empty() ? "" : ", ") + key + " " + buf;
  }
  return out;
}

}  // namespace wmtp
