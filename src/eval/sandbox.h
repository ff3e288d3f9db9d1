// Running untrusted generated programs. The evaluator never runs generated code in its own process:
// each program runs under a supervisor process, with rlimits (CPU seconds, address space, file size,
// processes, descriptors, no core files), stdin from memory, an environment of its own (PATH, LANG,
// LC_ALL, LC_CTYPE, LD_LIBRARY_PATH, PYTHON*, HOME and TMPDIR set to its directory: nothing else of
// the evaluator's), a seccomp filter (sandbox_seccomp.h) and no way to gain privileges (no_new_privs);
// at the timeout, when its output passes the cap, or when the evaluator dies, it is killed.
//
// Isolation, where the kernel allows it (decided once, when the Sandbox is made):
//   Namespaces (the evaluator is root): new network, PID, IPC and mount namespaces, then uid/gid
//     65534 (nobody).
//   UserNamespace (not root): the same inside a new user namespace, as the caller's own uid with no
//     capabilities.
// In both the program is the PID namespace's init (when it dies, the kernel kills everything it
// started, setsid() or not; it dies with its supervisor, which dies with the evaluator) and its root
// directory is a minimal one: /usr, /bin, /sbin, /lib*, /etc and the interpreter's installation
// directory bound read-only, a few device nodes, a fresh /proc of its own PID namespace, and
// size-capped tmpfs at /tmp, /var/tmp and /dev/shm; it runs in /tmp/work. Nothing it writes reaches
// the host's disk, and it cannot see the evaluator, its files (the benchmark, checkpoints) or its
// environment. The network namespace has only a downed loopback.
//   None (namespaces refused): process group, rlimits, environment, seccomp and — as root — uid 65534,
//     in a scratch directory under $TMPDIR. Sandbox says so loudly, and refuses when isolation is
//     required.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "eval/sandbox_seccomp.h"

namespace wmtp {

struct SandboxLimits {
  double timeout_s = 5.0;  // wall clock (weighted_mtp's 5 s per program)
  int64_t cpu_seconds = 10;
  int64_t address_space_mb = 4096;
  int64_t file_size_mb = 16;
  int64_t processes = 64;              // RLIMIT_NPROC (isolated: counted inside the sandbox's user)
  int64_t max_output_bytes = 4 << 20;  // per stream; more ends the run ("output limit")
  int64_t tmpfs_mb = 64;               // each of /tmp (the program's directory), /var/tmp, /dev/shm
  int64_t tmpfs_files = 16384;         // inodes of each of those
};

struct SandboxResult {
  int exit_code = -1;  // the program's exit status, 128 + signal when a signal ended it
  bool timed_out = false;
  bool output_limit = false;
  std::string exec_error;  // the program could not be started ("execve /x/python3: No such file ..."); exit 127
  std::string out, err;
  bool ok() const { return !timed_out && !output_limit && exec_error.empty() && exit_code == 0; }
  // "exit 0" | "exit 1" | "killed by signal 9" | "timeout" | "output limit" | "cannot execute: ..."
  std::string describe() const;
};

enum class SandboxIsolation { None, Namespaces, UserNamespace };

class Sandbox {
 public:
  // Probes what this process may do. `require_isolation`: Error(Usage) when namespaces are unavailable.
  Sandbox(SandboxLimits limits, bool require_isolation);
  bool isolated() const { return isolation_ != SandboxIsolation::None; }
  SandboxIsolation isolation() const { return isolation_; }
  const SandboxLimits& limits() const { return limits_; }
  // One line for the log: which isolation is used and the limits.
  std::string describe() const;
  // Runs argv in a fresh directory holding `files` (name -> content), stdin from `stdin_text`.
  // argv[0] is looked up in the evaluator's PATH (the directory above the one holding it is made
  // visible to the program: a virtual environment, a conda or pyenv installation). Call it from a
  // thread that outlives the call (the supervisor dies with the thread that started it).
  // Throws Error(Runtime) only when the sandbox itself cannot be set up.
  SandboxResult run(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& files,
                    const std::string& stdin_text) const;

 private:
  SandboxLimits limits_;
  SeccompFilter filter_;
  SandboxIsolation isolation_ = SandboxIsolation::None;
  bool seccomp_ = false;  // the kernel takes the filter (isolation requires it)
};

}  // namespace wmtp
