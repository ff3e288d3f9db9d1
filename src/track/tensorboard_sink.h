// TensorBoard event files: <dir>/events.out.tfevents.<unix time>.<host>, one per invocation (a
// resumed run starts a new file in the same directory and continues the steps; TensorBoard reads
// the files in name order and a step written again replaces the earlier value, as metrics.jsonl's
// last record of a step does). Every record becomes one Event of float32 simple_values; the
// resolved config is a text summary. Flushed after every record (each log interval) and at the end.
#pragma once
#include <memory>
#include <string>

#include "track/metrics_sink.h"
#include "track/tfrecord.h"

namespace wmtp {

// "events.out.tfevents.<unix time>.<host>"
std::string event_file_name(double unix_time, const std::string& host);

class TensorBoardSink : public MetricsSink {
 public:
  // Creates the directory and a new event file in it (".1", ".2", ... appended if the name is
  // taken); writes the file_version event and, unless `config_toml` is empty, the config as the
  // text summary "config" at `config_step`. Throws Error(Runtime) naming the path.
  TensorBoardSink(const std::string& dir, const std::string& config_toml, int64_t config_step);
  void write(int64_t step, double unix_time, const MetricValues& values) override;  // non-finite values skipped
  void finish(RunEnd end) override;
  const std::string& path() const { return writer_->path(); }

 private:
  std::unique_ptr<TfRecordWriter> writer_;
};

// The config as Markdown: a code block, so TensorBoard's text plugin shows the TOML verbatim.
std::string config_markdown(const std::string& config_toml);

}  // namespace wmtp
