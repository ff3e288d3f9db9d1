// StepProfiler: LibTorch's (Kineto) profiler around a few steps; Chrome-trace JSON out.
#include "train/step_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"

namespace wmtp {

namespace {

namespace tp = torch::profiler::impl;
namespace ap = torch::autograd::profiler;

std::set<tp::ActivityType> activities(c10::Device device) {
  std::set<tp::ActivityType> a = {tp::ActivityType::CPU};
  if (device.is_cuda()) a.insert(tp::ActivityType::CUDA);
  return a;
}

tp::ProfilerConfig profiler_config() { return tp::ProfilerConfig(tp::ProfilerState::KINETO); }

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

// Event times in microseconds. Newer LibTorch reports them in ns only (2.15 has no startUs/durationUs,
// 1.13 has no startNs), so the overload that compiles against this LibTorch is the one taken.
template <class E>
auto micros(const E& e, int) -> decltype(e.startNs(), std::pair<uint64_t, uint64_t>()) {
  return {e.startNs() / 1000, e.durationNs() / 1000};
}
template <class E>
std::pair<uint64_t, uint64_t> micros(const E& e, long) {
  return {e.startUs(), e.durationUs()};
}

// The profiler's own event list as Chrome-trace "complete" events: what a LibTorch without Kineto
// (which cannot save() its trace) still collects.
void write_events(const ap::ProfilerResult& result, const std::string& path) {
  std::ofstream out(path);
  out << "{\"traceEvents\": [\n";
  bool first = true;
  for (const ap::KinetoEvent& e : result.events()) {
    const auto [start_us, duration_us] = micros(e, 0);
    out << (first ? "" : ",\n") << "{\"name\": " << json_string(e.name()) << ", \"ph\": \"X\", \"cat\": "
        << json_string(e.deviceType() == c10::DeviceType::CPU ? "cpu_op" : "kernel") << ", \"ts\": " << start_us
        << ", \"dur\": " << duration_us << ", \"pid\": 0, \"tid\": " << e.startThreadId() << "}";
    first = false;
  }
  out << "\n], \"displayTimeUnit\": \"ms\"}\n";
  if (!out) throw_input("cannot write the profiler trace '", path, "'");
}

}  // namespace

StepProfiler::StepProfiler(int64_t steps, int64_t warmup, const std::string& run_dir, bool writer, c10::Device device)
    : steps_(steps), warmup_(warmup), path_((std::filesystem::path(run_dir) / "trace_rank0.json").string()),
      writer_(writer && steps > 0), device_(device) {}

StepProfiler::~StepProfiler() {
  if (!recording_) return;
  try {
    finish();
  } catch (...) {
    // A trace of a run that is ending on an error is not worth a second one.
  }
}

void StepProfiler::before_step(int64_t done) {
  if (!writer_ || recording_ || written_ || done != warmup_) return;
  ap::prepareProfiler(profiler_config(), activities(device_));
  ap::enableProfiler(profiler_config(), activities(device_));
  recording_ = true;
}

std::string StepProfiler::after_step(int64_t done) {
  if (!recording_ || done < warmup_ + steps_) return "";
  return finish();
}

std::string StepProfiler::finish() {
  recording_ = false;
  written_ = true;
  std::unique_ptr<ap::ProfilerResult> result = ap::disableProfiler();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  try {
    result->save(path_);  // Kineto's trace: CPU operators, GPU kernels, memory copies
  } catch (const c10::Error&) {
    write_events(*result, path_);  // LibTorch built without Kineto
  }
  return path_;
}

}  // namespace wmtp
