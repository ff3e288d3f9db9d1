// Where metric records go besides metrics.jsonl. MetricsLog (train/metrics.h) hands every record it
// writes to one sink (the fan-out, track/fanout.h); a sink never decides whether training goes on.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wmtp {

using MetricValues = std::vector<std::pair<std::string, double>>;

// How this invocation of the training program ends.
enum class RunEnd {
  Finished,  // all steps done
  Stopped,   // checkpointed and exited 75 to be resumed (signal, stop_after_steps)
  Failed,    // an error
};

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  // One record of metrics.jsonl: every value at `step`, stamped `unix_time` (the record's "time").
  virtual void write(int64_t step, double unix_time, const MetricValues& values) = 0;
  // The end of this invocation: make everything written durable or delivered, as far as possible.
  virtual void finish(RunEnd end) = 0;
};

}  // namespace wmtp
