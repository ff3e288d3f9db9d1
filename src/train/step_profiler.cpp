// StepProfiler: LibTorch's (Kineto) profiler around a few steps; Chrome-trace JSON out.
#include "train/step_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <unistd.h>

#include <algorithm>
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
    else if (static_cast<unsigned char>(c) < 0x20)
      out += ' ';
    else
      out += c;
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
    out << (first ? "" : ",\n") << "{\"name\": " << json_string(e.name())
        << ", \"ph\": \"X\", \"cat\": " << json_string(e.deviceType() == c10::DeviceType::CPU ? "cpu_op" : "kernel")
        << ", \"ts\": " << start_us << ", \"dur\": " << duration_us << ", \"pid\": 0, \"tid\": " << e.startThreadId()
        << "}";
    first = false;
  }
  out << "\n], \"displayTimeUnit\": \"ms\"}\n";
  out.close();  // a full disk shows at the last flush
  if (!out) throw_input("cannot write the profiler trace '", path, "'");
}

// Writes the trace to a temporary name beside `path` and renames it: a reader (and the next run)
// sees the whole trace or none. Kineto's save() does not report a short write, so its file must end
// like the JSON object it is.
void write_trace(ap::ProfilerResult& result, const std::string& path) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    try {
      result.save(tmp);  // Kineto's trace: CPU operators, GPU kernels, memory copies
    } catch (const c10::Error&) {
      write_events(result, tmp);  // LibTorch built without Kineto
    }
    std::ifstream in(tmp, std::ios::binary | std::ios::ate);
    const std::streamoff size = in ? std::streamoff(in.tellg()) : 0;
    std::string tail(size_t(std::min<std::streamoff>(size, 64)), ' ');
    if (in && size > 0) in.seekg(size - std::streamoff(tail.size())).read(&tail[0], std::streamsize(tail.size()));
    const size_t end = tail.find_last_not_of(" \n\r\t");
    if (!in || end == std::string::npos || tail[end] != '}')
      throw_input("the trace written to '", tmp, "' is incomplete (", size, " bytes; a full disk?)");
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    std::filesystem::remove(tmp + ".tmp", ec);  // Kineto's own temporary, left when its write failed
    throw;
  }
}

std::string step_range(int64_t first, int64_t last) {
  return first == last ? "step " + std::to_string(first)
                       : "steps " + std::to_string(first) + "-" + std::to_string(last);
}

}  // namespace

StepProfiler::StepProfiler(int64_t steps, int64_t warmup, const std::string& run_dir, bool writer, c10::Device device)
    : steps_(steps),
      warmup_(warmup),
      run_dir_(run_dir),
      path_((std::filesystem::path(run_dir) / "trace_rank0.json").string()),
      writer_(writer && steps > 0),
      device_(device) {}

StepProfiler::~StepProfiler() {
  if (!recording_) return;
  try {
    ap::disableProfiler();
  } catch (...) {
    // A trace of a run that is ending on an error is not worth a second one.
  }
}

std::string StepProfiler::plan(int64_t start_step, int64_t end_step) {
  start_step_ = start_step;
  if (steps_ <= 0) return "";
  const int64_t first = start_step + warmup_ + 1, last = start_step + warmup_ + steps_;
  const std::string window = "[logging] profile_steps window (" + step_range(first, last) + ")";
  if (first > end_step)
    return window + " starts after this run's last step " + std::to_string(end_step) +
           ": no trace will be written (lower logging.profile_warmup)";
  std::string note;
  if (last > end_step)
    note = window + " is cut by this run's last step " + std::to_string(end_step) + ": the trace will hold " +
           step_range(first, end_step);
  std::error_code ec;
  if (writer_ && std::filesystem::is_regular_file(path_, ec)) {
    // A resumed run keeps the earlier trace: its own is named after its first step.
    const std::string earlier = path_;
    const std::filesystem::path dir(run_dir_);
    path_ = (dir / ("trace_rank0_step" + std::to_string(first) + ".json")).string();
    for (int k = 2; std::filesystem::exists(path_, ec); ++k)
      path_ = (dir / ("trace_rank0_step" + std::to_string(first) + "_" + std::to_string(k) + ".json")).string();
    note += std::string(note.empty() ? "" : "; ") + "an earlier trace is kept (" + earlier + "): this run's goes to " +
            path_;
  }
  return note;
}

void StepProfiler::before_step(int64_t done) {
  if (!writer_ || recording_ || written_ || done != warmup_) return;
  ap::prepareProfiler(profiler_config(), activities(device_));
  ap::enableProfiler(profiler_config(), activities(device_));
  recording_ = true;
}

std::optional<TraceWrite> StepProfiler::after_step(int64_t done) {
  if (!recording_ || done < warmup_ + steps_) return std::nullopt;
  return finish(done);
}

std::optional<TraceWrite> StepProfiler::finish_early(int64_t done) {
  if (!recording_) return std::nullopt;
  return finish(done);
}

TraceWrite StepProfiler::finish(int64_t done) {
  recording_ = false;
  written_ = true;
  TraceWrite w;
  w.first = start_step_ + warmup_ + 1;
  w.last = start_step_ + done;
  w.path = path_;
  try {
    std::unique_ptr<ap::ProfilerResult> result = ap::disableProfiler();
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
    write_trace(*result, path_);
  } catch (const c10::Error& e) {
    w.failure = e.what_without_backtrace();
  } catch (const std::exception& e) {
    w.failure = e.what();
  }
  return w;
}

}  // namespace wmtp
