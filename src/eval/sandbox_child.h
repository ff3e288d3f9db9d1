// The sandbox's processes after fork (internal to sandbox.cpp): the supervisor, which enters the
// namespaces, forks the program and outlives it only to report its status; and the program's own
// set-up (its root directory, privileges, limits, files, descriptors, filter) up to execve. The
// evaluator is multithreaded, so everything here is prepared before fork (ChildPlan) and uses only
// async-signal-safe calls.
#pragma once
#include <sys/types.h>
#include <sys/wait.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "eval/sandbox.h"
#include "eval/sandbox_seccomp.h"

namespace wmtp {

// One step of building the program's root directory (paths are absolute, under kSandboxStaging).
struct MountStep {
  enum Kind { Dir, Symlink, File, Bind, Device, Tmpfs, Proc } kind;
  std::string path;
  std::string arg;  // Bind/Device: the host path; Symlink: the link's text; Tmpfs: mount options
  std::string describe() const;
};

// Where the new root is assembled before pivot_root (a tmpfs mounted over the host's /tmp inside the
// program's own mount namespace: host paths under /tmp are never bound, see sandbox.cpp).
inline constexpr const char* kSandboxStaging = "/tmp";

// What failed before the program ran, written by the supervisor or the program's process to the
// report pipe: a MountStep index (>= 0) or a stage, and errno.
enum SandboxStage : int32_t {
  kStageUnshare = -1,
  kStageIdMaps = -2,
  kStageFork = -3,
  kStageMountNamespace = -4,
  kStagePrivateMounts = -5,
  kStagePivotRoot = -6,
  kStageWorkDir = -7,
  kStageDropPrivileges = -8,
  kStageWriteFiles = -9,
  kStageStdio = -10,
  kStageSeccomp = -11,
  kStageExec = -12,  // execve itself: the program's failure (exit 127), not the sandbox's
};
struct SandboxFailure {
  int32_t step;
  int32_t err;
};
const char* stage_name(int32_t step);  // for the evaluator's message

// A wait status as a shell reports it: the exit code, or 128 + the signal.
inline int wait_status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

struct ChildPlan {
  SandboxIsolation isolation = SandboxIsolation::None;
  bool drop_to_nobody = false;          // the evaluator is root: the program runs as 65534
  std::vector<std::string> exec_paths;  // tried in order, as execvp does (EACCES, ENOENT: the next)
  std::vector<std::string> argv_store, env_store;
  std::vector<char*> argv, envp;  // null-terminated views of the stores
  const std::vector<std::pair<std::string, std::string>>* files = nullptr;
  std::string work;     // the program's directory: /tmp/work in its root, or the host scratch (None)
  std::string scratch;  // None: the host scratch directory, removed by the supervisor if the evaluator dies
  std::vector<std::string> rm_store;
  std::vector<char*> rm_argv;  // rm -rf scratch
  std::vector<MountStep> mounts;
  std::string setgroups_deny, uid_map, gid_map;  // UserNamespace: the caller's ids mapped to themselves
  pid_t evaluator = 0;
  int stdin_fd = -1, out_fd = -1, err_fd = -1, report_fd = -1;
  SandboxLimits lim;
  const SeccompFilter* filter = nullptr;  // null: none installed
};

// The supervisor's process (forked by the evaluator): never returns.
[[noreturn]] void run_supervisor(const ChildPlan& c);

// Makes the calling process enter c.isolation's namespaces (its children get the PID namespace):
// 0, or the failing stage with errno set. Also the Sandbox's probe, in a child of its own.
int32_t enter_namespaces(const ChildPlan& c);
// After enter_namespaces: whether a child may have a mount namespace of its own and mount a tmpfs
// there (a kernel may allow user namespaces yet deny what they grant: AppArmor's restriction).
bool can_mount_in_namespaces();

}  // namespace wmtp
