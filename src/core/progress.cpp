// Progress lines: in place on a terminal, periodic log lines otherwise.
#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

#include "core/timer.h"

namespace wmtp {

namespace {
constexpr double kQuietSeconds = 2.0;  // nothing for work shorter than this
constexpr double kTtyInterval = 0.5;
constexpr double kLogInterval = 30.0;

std::string amount(double v, Progress::Unit unit) {
  char buf[48];
  if (unit == Progress::Unit::Bytes) {
    if (v >= 1e9) snprintf(buf, sizeof buf, "%.2f GB", v / 1e9);
    else
      snprintf(buf, sizeof buf, "%.1f MB", v / 1e6);
  } else {
    snprintf(buf, sizeof buf, "%.0f", v);
  }
  return buf;
}
}  // namespace

Progress::Progress(const Logger& log, std::string what, int64_t total, Unit unit)
    : active_(log.rank() == 0 && total > 0),
      tty_(isatty(fileno(stderr)) != 0),
      log_(log),
      what_(std::move(what)),
      total_(total),
      unit_(unit),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() { finish(); }

std::string Progress::describe(int64_t done, int64_t total, Unit unit, double seconds) {
  const double rate = seconds > 0 ? double(done) / seconds : 0;
  const double eta = rate > 0 ? double(total - done) / rate : -1;
  char buf[160];
  snprintf(buf, sizeof buf, "%s of %s (%.0f%%), %s%s/s, eta %s", amount(double(done), unit).c_str(),
           amount(double(total), unit).c_str(), total > 0 ? 100.0 * double(done) / double(total) : 0.0,
           amount(rate, unit).c_str(), unit == Unit::Items ? " items" : "", format_duration(eta).c_str());
  return buf;
}

void Progress::update(int64_t done) {
  if (!active_) return;
  done_ = done;
  const auto now = std::chrono::steady_clock::now();
  const double since_start = std::chrono::duration<double>(now - start_).count();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  if (since_start < kQuietSeconds || since_last < (tty_ ? kTtyInterval : kLogInterval)) return;
  last_ = now;
  const std::string line = what_ + ": " + describe(done, total_, unit_, since_start);
  if (tty_) {
    fprintf(stderr, "\r%s\x1b[K", line.c_str());
    fflush(stderr);
  } else {
    log_.info("%s", line.c_str());
  }
  printed_ = true;
}

void Progress::finish() {
  if (!active_) return;
  active_ = false;
  if (printed_ && tty_) {
    fprintf(stderr, "\r%s: %s\x1b[K\n", what_.c_str(),
            describe(done_, total_, unit_,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count())
                .c_str());
    fflush(stderr);
  }
}

}  // namespace wmtp
