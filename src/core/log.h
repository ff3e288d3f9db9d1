// Rank-aware logger. Rank 0 prints info; every rank prints warnings and errors, prefixed with
// "[rank R host]" so a Slurm log that interleaves 512 ranks still says who complained.
// A Logger is a small value passed to whoever needs it (no global instance).
#pragma once
#include <cstdarg>
#include <cstdio>
#include <string>

namespace wmtp {

// This machine's name (gethostname): what logs, errors and lock files say a rank runs on.
std::string host_name();

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

class Logger {
 public:
  Logger() = default;  // rank 0, this host, info level: single-process tools and tests
  Logger(int rank, std::string host, LogLevel level = LogLevel::Info);

  int rank() const { return rank_; }
  void set_level(LogLevel level) { level_ = level; }

  // printf-style; info/debug only from rank 0, warn/error from every rank.
  void debug(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  void info(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  void warn(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  void error(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));

 private:
  void vlog(LogLevel level, bool all_ranks, const char* fmt, va_list ap) const;
  int rank_ = 0;
  std::string host_;
  LogLevel level_ = LogLevel::Info;
};

}  // namespace wmtp
