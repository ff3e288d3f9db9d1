// Logger implementation: one fprintf per line (lines from different ranks do not interleave
// mid-line), stdout for info, stderr for warnings and errors, flushed at once (Slurm log files).
#include "core/log.h"

#include <unistd.h>

#include <cstdarg>
#include <ctime>

namespace wmtp {

std::string host_name() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

Logger::Logger(int rank, std::string host, LogLevel level) : rank_(rank), host_(std::move(host)), level_(level) {}

void Logger::vlog(LogLevel level, bool all_ranks, const char* fmt, va_list ap) const {
  if (level < level_) return;
  if (level <= LogLevel::Info && !all_ranks && rank_ != 0) return;
  char body[4096];
  vsnprintf(body, sizeof(body), fmt, ap);
  FILE* out = level >= LogLevel::Warn ? stderr : stdout;
  if (level >= LogLevel::Warn || all_ranks) {
    const char* tag = level == LogLevel::Error ? "error" : level == LogLevel::Warn ? "warning" : "info";
    std::string host = host_.empty() ? host_name() : host_;
    fprintf(out, "[rank %d %s] %s: %s\n", rank_, host.c_str(), tag, body);
  } else {
    fprintf(out, "%s\n", body);
  }
  fflush(out);
}

#define WMTP_LOG_IMPL(name, level, all)           \
  void Logger::name(const char* fmt, ...) const { \
    va_list ap;                                   \
    va_start(ap, fmt);                            \
    vlog(level, all, fmt, ap);                    \
    va_end(ap);                                   \
  }
WMTP_LOG_IMPL(debug, LogLevel::Debug, false)
WMTP_LOG_IMPL(info, LogLevel::Info, false)
WMTP_LOG_IMPL(warn, LogLevel::Warn, true)
WMTP_LOG_IMPL(error, LogLevel::Error, true)
#undef WMTP_LOG_IMPL

}  // namespace wmtp
