// TensorBoardSink (see tensorboard_sink.h).
#include "track/tensorboard_sink.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "track/tb_event.h"

namespace wmtp {

namespace {

double now_unix() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

std::string event_file_name(double unix_time, const std::string& host) {
  return "events.out.tfevents." + std::to_string(int64_t(unix_time)) + "." + host;
}

std::string config_markdown(const std::string& config_toml) {
  std::string md;
  size_t start = 0;
  while (start < config_toml.size()) {
    size_t end = config_toml.find('\n', start);
    if (end == std::string::npos) end = config_toml.size();
    md += "    " + config_toml.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return md;
}

TensorBoardSink::TensorBoardSink(const std::string& dir, const std::string& config_toml, int64_t config_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_runtime("cannot create the TensorBoard directory '", dir, "': ", ec.message());
  const double t = now_unix();
  const std::string base = (std::filesystem::path(dir) / event_file_name(t, host_name())).string();
  std::string path = base;
  for (int n = 1; std::filesystem::exists(path); ++n) path = base + "." + std::to_string(n);
  writer_ = std::make_unique<TfRecordWriter>(path);
  writer_->write(encode_file_version_event(t));
  if (!config_toml.empty()) writer_->write(encode_text_event(t, config_step, "config", config_markdown(config_toml)));
  writer_->flush();
}

void TensorBoardSink::write(int64_t step, double unix_time, const MetricValues& values) {
  MetricValues finite;
  for (const auto& kv : values)
    if (std::isfinite(kv.second)) finite.push_back(kv);
  if (finite.empty()) return;
  writer_->write(encode_scalars_event(unix_time, step, finite));
  writer_->flush();
}

void TensorBoardSink::finish(RunEnd) { writer_->flush(); }

}  // namespace wmtp
