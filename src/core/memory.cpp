// /proc/self/status readers for resident memory.
#include "core/memory.h"

#include <cstdio>
#include <cstring>

namespace wmtp {

namespace {
int64_t status_kib(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  int64_t kib = 0;
  size_t n = std::strlen(key);
  while (std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      long long v = 0;
      std::sscanf(line + n + 1, "%lld", &v);
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}
}  // namespace

int64_t current_rss_bytes() { return status_kib("VmRSS"); }
int64_t peak_rss_bytes() { return status_kib("VmHWM"); }

}  // namespace wmtp
