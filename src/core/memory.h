// Process memory as the OS sees it (resident set, and its peak), for logs, benches and the
// --dry-run estimate check. Linux /proc/self/status; 0 where unavailable.
#pragma once
#include <cstdint>

namespace wmtp {

int64_t current_rss_bytes();  // VmRSS
int64_t peak_rss_bytes();     // VmHWM (high-water mark since start)

}  // namespace wmtp
