// Progress of long work (tokenizing a corpus, importing or exporting weights, reading a big
// checkpoint) for the person waiting: on rank 0 only, a line rewritten in place at most twice a
// second when stderr is a terminal, otherwise a plain log line every 30 s (batch logs stay short).
// Work under 2 s prints nothing. update() is cheap enough to call per item (one clock read).
//
//   Progress p(log, "tokenizing", total_bytes, Progress::Unit::Bytes);
//   for (...) { ...; p.update(done_bytes); }
//   p.finish();   // or let the destructor do it
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "core/log.h"

namespace wmtp {

class Progress {
 public:
  enum class Unit { Bytes, Items };
  Progress(const Logger& log, std::string what, int64_t total, Unit unit = Unit::Items);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(int64_t done);
  void finish();  // ends the line on a terminal; idempotent

  // "12.5 MB of 100.0 MB (12%), 3.1 MB/s, eta 28s" (exposed for tests).
  static std::string describe(int64_t done, int64_t total, Unit unit, double seconds);

 private:
  bool active_ = false, tty_ = false, printed_ = false;
  Logger log_;
  std::string what_;
  int64_t total_ = 0, done_ = 0;
  Unit unit_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace wmtp
