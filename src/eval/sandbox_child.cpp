// The sandbox after fork: the supervisor and the program's set-up. Async-signal-safe calls only.
#include "eval/sandbox_child.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace wmtp {

namespace {
constexpr uid_t kNobody = 65534;

// The program the supervisor watches (its process group). A signal handler can reach nothing else,
// and the supervisor is a process of its own, so this is its only state.
volatile sig_atomic_t g_program = 0;
volatile sig_atomic_t g_stop = 0;

// SIGTERM to the supervisor (the evaluator's timeout, or its death through PR_SET_PDEATHSIG): the
// program's group dies; being its PID namespace's init, so does everything it started.
void on_stop(int) {
  g_stop = 1;
  if (g_program > 0) {
    kill(-g_program, SIGKILL);
    kill(g_program, SIGKILL);  // before its setsid() it has no group of its own yet
  }
}

[[noreturn]] void fail(const ChildPlan& c, int32_t step, int code) {
  const SandboxFailure f{step, errno};
  if (write(c.report_fd, &f, sizeof f) < 0) {
  }  // nothing more to do if the evaluator is gone
  _exit(code);
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool write_file(const char* path, const std::string& text, int flags) {
  const int fd = open(path, flags | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return false;
  const bool ok = write_all(fd, text.data(), text.size());
  const int saved = errno;
  close(fd);
  errno = saved;
  return ok;
}

// The supervisor died between two checks of the program's process: it must not run on alone.
bool supervisor_gone(int life) {
  pollfd p{life, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR));
}

// Bound trees become read-only (their sub-mounts too where the kernel has mount_setattr); flags the
// kernel locks in a user namespace (noexec, atime) are kept, as it requires.
bool make_read_only(const char* path) {
#if defined(SYS_mount_setattr) && defined(MOUNT_ATTR_RDONLY)
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &attr, sizeof attr) == 0) return true;
#endif
  struct statfs s {};
  if (statfs(path, &s) != 0) return false;
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV;
  if (s.f_flags & ST_NOEXEC) flags |= MS_NOEXEC;
  if (s.f_flags & ST_NOATIME) flags |= MS_NOATIME;
  if (s.f_flags & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (s.f_flags & ST_RELATIME) flags |= MS_RELATIME;
  return mount(nullptr, path, nullptr, flags, nullptr) == 0;
}

bool apply(const MountStep& s) {
  const char* p = s.path.c_str();
  switch (s.kind) {
    case MountStep::Dir: return mkdir(p, 0755) == 0 || errno == EEXIST;
    case MountStep::Symlink: return symlink(s.arg.c_str(), p) == 0;
    case MountStep::File: return write_file(p, "", O_CREAT | O_EXCL);
    case MountStep::Bind: return mount(s.arg.c_str(), p, nullptr, MS_BIND | MS_REC, nullptr) == 0 && make_read_only(p);
    case MountStep::Device: return mount(s.arg.c_str(), p, nullptr, MS_BIND, nullptr) == 0;
    case MountStep::Tmpfs: return mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV, s.arg.c_str()) == 0;
    case MountStep::Proc:
      // A procfs of the program's PID namespace. Where the kernel refuses one (a container that
      // masks parts of its own /proc), /proc stays an empty directory: the host's is gone either way.
      mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
      return true;
  }
  return false;
}

// In the program's own mount namespace: the new root assembled at kSandboxStaging, then made the
// root (the host's tree detached), read-only but for its tmpfs, with the program's directory.
void build_root(const ChildPlan& c) {
  if (unshare(CLONE_NEWNS) != 0) fail(c, kStageMountNamespace, 126);
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail(c, kStagePrivateMounts, 126);
  for (size_t i = 0; i < c.mounts.size(); ++i)
    if (!apply(c.mounts[i])) fail(c, static_cast<int32_t>(i), 126);
  const unsigned long read_only = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV;
  if (chdir(kSandboxStaging) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 ||
      chdir("/") != 0 || mount(nullptr, "/", nullptr, read_only, nullptr) != 0)
    fail(c, kStagePivotRoot, 126);
  if (mkdir(c.work.c_str(), 0700) != 0) fail(c, kStageWorkDir, 126);
}

void set_limit(int what, rlim_t v) {
  struct rlimit r {
    v, v
  };
  setrlimit(what, &r);
}

// Descriptors 3 and up close at execve (the report pipe stays open until then).
void close_on_exec_from_3() {
#if defined(SYS_close_range) && defined(CLOSE_RANGE_CLOEXEC)
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
#endif
  for (int fd = 3; fd < 65536; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
}

// In the program's process (the PID namespace's init when isolated), up to execve.
[[noreturn]] void run_program(const ChildPlan& c, int life) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (supervisor_gone(life)) _exit(125);
  setsid();  // a group of its own, and no controlling terminal (TIOCSTI could type into the user's shell)
  if (c.isolation != SandboxIsolation::None) build_root(c);
  if (c.drop_to_nobody && chown(c.work.c_str(), kNobody, kNobody) != 0) fail(c, kStageWorkDir, 126);
  if (chdir(c.work.c_str()) != 0) fail(c, kStageWorkDir, 126);
  if (c.drop_to_nobody && (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 ||
                           setresuid(kNobody, kNobody, kNobody) != 0))
    fail(c, kStageDropPrivileges, 126);
  // A change of uid clears the parent-death signal (prctl(2)): set it again, then make sure the
  // supervisor did not die in between.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (supervisor_gone(life)) _exit(125);
  for (const auto& [name, text] : *c.files)
    if (!write_file(name.c_str(), text, O_CREAT | O_EXCL)) fail(c, kStageWriteFiles, 126);
  set_limit(RLIMIT_CPU, static_cast<rlim_t>(c.lim.cpu_seconds));
  set_limit(RLIMIT_AS, static_cast<rlim_t>(c.lim.address_space_mb) << 20);
  set_limit(RLIMIT_FSIZE, static_cast<rlim_t>(c.lim.file_size_mb) << 20);
  set_limit(RLIMIT_CORE, 0);
  set_limit(RLIMIT_NOFILE, 256);
  // After the uid change: set before, a uid already over it would make execve fail with EAGAIN.
  set_limit(RLIMIT_NPROC, static_cast<rlim_t>(c.lim.processes));
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // the evaluator's ignored signals
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (dup2(c.stdin_fd, 0) < 0 || dup2(c.out_fd, 1) < 0 || dup2(c.err_fd, 2) < 0) fail(c, kStageStdio, 126);
  close_on_exec_from_3();
  if (c.filter && !install_seccomp_filter(*c.filter)) fail(c, kStageSeccomp, 126);
  int err = ENOENT;
  for (const std::string& path : c.exec_paths) {
    execve(path.c_str(), c.argv.data(), c.envp.data());
    if (errno == EACCES) err = EACCES;
    else if (errno != ENOENT && errno != ENOTDIR) {
      err = errno;
      break;
    }
  }
  errno = err;
  fail(c, kStageExec, 127);
}

bool write_proc_self(const char* name, const std::string& text) {
  char path[64] = "/proc/self/";
  strncat(path, name, sizeof path - strlen(path) - 1);
  return write_file(path, text, 0);
}
}  // namespace

int32_t enter_namespaces(const ChildPlan& c) {
  constexpr int kOthers = CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC;
  if (c.isolation == SandboxIsolation::Namespaces) return unshare(kOthers) == 0 ? 0 : kStageUnshare;
  if (c.isolation != SandboxIsolation::UserNamespace) return 0;
  if (unshare(CLONE_NEWUSER | kOthers) != 0) return kStageUnshare;
  if (!write_proc_self("setgroups", c.setgroups_deny) || !write_proc_self("uid_map", c.uid_map) ||
      !write_proc_self("gid_map", c.gid_map))
    return kStageIdMaps;
  return 0;
}

bool can_mount_in_namespaces() {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0)
    _exit(unshare(CLONE_NEWNS) == 0 && mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                  mount("tmpfs", kSandboxStaging, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") == 0
              ? 0
              : 1);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return false;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

[[noreturn]] void run_supervisor(const ChildPlan& c) {
  setpgid(0, 0);
  struct sigaction sa {};
  sa.sa_handler = on_stop;  // no SA_RESTART: waitpid returns to look at g_stop
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (const int32_t stage = enter_namespaces(c)) fail(c, stage, 125);
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // again after the credentials changed, then the parent checked
  bool orphan = getppid() != c.evaluator;
  int life[2];
  if (pipe2(life, O_CLOEXEC) != 0) fail(c, kStageFork, 125);
  const pid_t pid = orphan ? -1 : fork();
  if (pid < 0 && !orphan) fail(c, kStageFork, 125);
  if (pid == 0) {
    close(life[1]);
    run_program(c, life[0]);
  }
  close(life[0]);
  close(c.stdin_fd);
  close(c.out_fd);
  close(c.err_fd);
  close(c.report_fd);
  int st = 0;
  if (pid > 0) {
    g_program = pid;
    if (g_stop) on_stop(SIGTERM);
    // Its end seen but not reaped: while it is a zombie its pid (the group's id) cannot be reused, so
    // the group kill reaches only what is left of its group (no isolation: children it did not wait for).
    siginfo_t info{};
    while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) continue;
    kill(-pid, SIGKILL);
    g_program = 0;
    while (waitpid(pid, &st, 0) < 0)
      if (errno != EINTR) break;
  }
  orphan = orphan || getppid() != c.evaluator;
  if (orphan && !c.rm_argv.empty()) {  // the evaluator is gone: nobody else will remove the scratch
    static char* const kNoEnv[] = {nullptr};
    execve("/bin/rm", c.rm_argv.data(), kNoEnv);
    execve("/usr/bin/rm", c.rm_argv.data(), kNoEnv);
  }
  _exit(wait_status_code(st));
}

}  // namespace wmtp
