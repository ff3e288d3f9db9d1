// Wall-clock timer for step timing and benchmarks (steady clock, seconds as double), and durations
// for people ("42s", "3m12s", "2h05m").
#pragma once
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

namespace wmtp {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// "?" for a negative or non-finite duration.
inline std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600) snprintf(buf, sizeof(buf), "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    snprintf(buf, sizeof(buf), "%ldm%02lds", t / 60, t % 60);
  else
    snprintf(buf, sizeof(buf), "%lds", t);
  return buf;
}

}  // namespace wmtp
