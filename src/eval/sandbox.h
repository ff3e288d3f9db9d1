// Running untrusted generated programs. The evaluator never runs generated code in its own process:
// each program runs in a child process group, in a fresh temporary directory (removed afterwards),
// under rlimits (CPU seconds, address space, file size, processes, no core files), with stdin from a
// file, and the whole group is killed at the timeout or when its output passes the cap.
//
// Isolation "namespaces" (root, or where the kernel lets this process unshare them): a new network
// namespace (no interface but a downed loopback: no socket reaches anything), a new PID namespace
// (the program is its init: when it or its supervisor dies the kernel kills everything it started,
// setsid() or not), a new mount namespace with fresh size-capped tmpfs over /tmp, /var/tmp and
// /dev/shm (the work directory bound in at /tmp/work), and — as root — the program drops to uid/gid
// 65534 (nobody), so the rest of the file system is read-only to it and RLIMIT_NPROC holds.
// Isolation "none": process group and rlimits only; Sandbox says so loudly, and refuses when
// isolation is required.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wmtp {

struct SandboxLimits {
  double timeout_s = 5.0;            // wall clock (the original: 5 s per program)
  int64_t cpu_seconds = 10;
  int64_t address_space_mb = 4096;
  int64_t file_size_mb = 16;
  int64_t processes = 64;            // RLIMIT_NPROC of the sandbox user
  int64_t max_output_bytes = 4 << 20;  // per stream; more ends the run ("output limit")
  int64_t tmpfs_mb = 64;
};

struct SandboxResult {
  int exit_code = -1;  // the program's exit status, 128 + signal when a signal ended it
  bool timed_out = false;
  bool output_limit = false;
  std::string out, err;
  bool ok() const { return !timed_out && !output_limit && exit_code == 0; }
  std::string describe() const;  // "exit 0" | "exit 1" | "killed by signal 9" | "timeout" | "output limit"
};

class Sandbox {
 public:
  // Probes what this process may do. `require_isolation`: Error(Usage) when namespaces are unavailable.
  Sandbox(SandboxLimits limits, bool require_isolation);
  bool isolated() const { return isolated_; }
  const SandboxLimits& limits() const { return limits_; }
  // One line for the log: which isolation is used and the limits.
  std::string describe() const;
  // Runs argv (argv[0] looked up in PATH) in a fresh directory holding `files` (name -> content),
  // stdin from `stdin_text`. Throws Error(Runtime) only when the sandbox itself cannot be set up.
  SandboxResult run(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& files,
                    const std::string& stdin_text) const;

 private:
  SandboxLimits limits_;
  bool isolated_ = false;
};

}  // namespace wmtp
