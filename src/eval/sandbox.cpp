// The sandbox: fork a supervisor (own process group, new namespaces), which forks the program
// (pid-namespace init, dropped privileges, rlimits, tmpfs'd scratch dirs) and reports its status.
#include "eval/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <grp.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"

namespace fs = std::filesystem;

namespace wmtp {

namespace {
constexpr uid_t kNobody = 65534;
constexpr int kNamespaces = CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS;

int wait_child(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) continue;
  return st;
}

// A wait status as a shell reports it: the exit code, or 128 + the signal.
int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

bool can_unshare() {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) _exit(unshare(kNamespaces) == 0 ? 0 : 1);
  return status_code(wait_child(pid)) == 0;
}

void set_limit(int what, rlim_t v) {
  struct rlimit r {v, v};
  setrlimit(what, &r);
}

// Everything the program's child needs, prepared before fork (no allocation after it).
struct ChildPlan {
  std::vector<std::string> argv_store;
  std::vector<char*> argv;
  std::string work, tmpfs_opts;
  int stdin_fd = -1, out_fd = -1, err_fd = -1;
  bool isolated = false, drop = false;
  SandboxLimits lim;
};

// In the program's process (pid 1 of its namespace when isolated). Async-signal-safe calls only.
[[noreturn]] void exec_program(const ChildPlan& c) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // the supervisor's death ends the namespace
  const char* dir = c.work.c_str();
  if (c.isolated) {
    const int wfd = open(dir, O_PATH | O_DIRECTORY);
    if (wfd < 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(126);
    for (const char* t : {"/tmp", "/var/tmp", "/dev/shm"})
      if (access(t, F_OK) == 0 &&
          mount("tmpfs", t, "tmpfs", MS_NOSUID | MS_NODEV, c.tmpfs_opts.c_str()) != 0)
        _exit(126);
    char src[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", wfd);
    if (mkdir("/tmp/work", 0700) != 0 || mount(src, "/tmp/work", nullptr, MS_BIND, nullptr) != 0) _exit(126);
    close(wfd);
    dir = "/tmp/work";
  }
  if (chdir(dir) != 0) _exit(126);
  set_limit(RLIMIT_CPU, static_cast<rlim_t>(c.lim.cpu_seconds));
  set_limit(RLIMIT_AS, static_cast<rlim_t>(c.lim.address_space_mb) << 20);
  set_limit(RLIMIT_FSIZE, static_cast<rlim_t>(c.lim.file_size_mb) << 20);
  set_limit(RLIMIT_CORE, 0);
  set_limit(RLIMIT_NOFILE, 256);
  if (c.drop) {
    set_limit(RLIMIT_NPROC, static_cast<rlim_t>(c.lim.processes));
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(126);
  }
  if (dup2(c.stdin_fd, 0) < 0 || dup2(c.out_fd, 1) < 0 || dup2(c.err_fd, 2) < 0) _exit(126);
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  execvp(c.argv[0], c.argv.data());
  _exit(127);
}

// The supervisor: its own process group, the namespaces, then the program; exits with its status.
[[noreturn]] void supervise(const ChildPlan& c) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setpgid(0, 0);
  if (c.isolated && unshare(kNamespaces) != 0) _exit(125);
  const pid_t pid = fork();
  if (pid < 0) _exit(125);
  if (pid == 0) exec_program(c);
  close(c.stdin_fd);
  close(c.out_fd);
  close(c.err_fd);
  _exit(status_code(wait_child(pid)));
}

void kill_group(pid_t sup) {
  killpg(sup, SIGKILL);
  kill(sup, SIGKILL);
}

// The plan for a fresh scratch directory (mkdtemp under $TMPDIR, else /tmp).
ChildPlan plan_child(const std::vector<std::string>& argv, const SandboxLimits& limits, bool isolated) {
  const char* base = std::getenv("TMPDIR");
  ChildPlan c;
  c.work = std::string(base && *base ? base : "/tmp") + "/wmtp-sandbox-XXXXXX";
  if (mkdtemp(c.work.data()) == nullptr) throw_runtime("sandbox: mkdtemp in ", c.work, ": ", std::strerror(errno));
  c.isolated = isolated;
  c.drop = isolated && geteuid() == 0;
  c.lim = limits;
  c.tmpfs_opts = "size=" + std::to_string(limits.tmpfs_mb) + "m,mode=1777";
  c.argv_store = argv;
  for (auto& a : c.argv_store) c.argv.push_back(a.data());
  c.argv.push_back(nullptr);
  return c;
}

// The files in the scratch directory (handed to uid 65534 when privileges drop), stdin, the output pipes.
void prepare_child(ChildPlan& c, const std::vector<std::pair<std::string, std::string>>& files,
                   const std::string& stdin_text, int (&out)[2], int (&err)[2]) {
  for (const auto& [name, text] : files) {
    std::ofstream f(fs::path(c.work) / name, std::ios::binary);
    f << text;
    if (!f) throw_runtime("sandbox: cannot write ", name, " in ", c.work);
  }
  const std::string in_path = c.work + ".stdin";  // outside the program's directory
  { std::ofstream(in_path, std::ios::binary) << stdin_text; }
  c.stdin_fd = open(in_path.c_str(), O_RDONLY | O_CLOEXEC);
  unlink(in_path.c_str());
  if (c.stdin_fd < 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    throw_runtime("sandbox: cannot set up stdin/pipes: ", std::strerror(errno));
  if (c.drop) {
    bool owned = chown(c.work.c_str(), kNobody, kNobody) == 0;
    for (const auto& f : files) owned = owned && chown((fs::path(c.work) / f.first).c_str(), kNobody, kNobody) == 0;
    if (!owned) throw_runtime("sandbox: cannot hand ", c.work, " to uid 65534: ", std::strerror(errno));
  }
  c.out_fd = out[1];
  c.err_fd = err[1];
}

// Forks the supervisor and keeps only the pipes' read ends here.
pid_t start_supervisor(const ChildPlan& c, int (&out)[2], int (&err)[2]) {
  const pid_t sup = fork();
  if (sup < 0) throw_runtime("sandbox: fork: ", std::strerror(errno));
  if (sup == 0) supervise(c);
  setpgid(sup, sup);  // also here: no window in which a kill of the group misses it
  close(out[1]);
  close(err[1]);
  close(c.stdin_fd);
  out[1] = err[1] = -1;
  return sup;
}

using Deadline = decltype(std::chrono::steady_clock::now() + std::chrono::duration<double>());

// Reads stdout and stderr into `r` until both close (each fd set to -1 as it is closed), the deadline
// passes (r.timed_out) or the output passes its limit (r.output_limit).
void read_streams(int& out_fd, int& err_fd, Deadline deadline, int64_t max_output_bytes, SandboxResult& r) {
  pollfd pf[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sink[2] = {&r.out, &r.err};
  int open_streams = 2;
  char buf[65536];
  while (open_streams > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    if (poll(pf, 2, static_cast<int>(std::min<int64_t>(left.count(), 100))) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(pf[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(pf[i].fd);
        pf[i].fd = (i == 0 ? out_fd : err_fd) = -1;
        --open_streams;
        continue;
      }
      sink[i]->append(buf, static_cast<size_t>(n));
      if (static_cast<int64_t>(sink[i]->size()) > max_output_bytes) r.output_limit = true;
    }
    if (r.output_limit) break;
  }
}

// Waits for the supervisor (the streams may close before it exits, e.g. a program that closed stdout),
// killing its group at the deadline; returns its wait status.
int wait_supervisor(pid_t sup, Deadline deadline, bool& killed, SandboxResult& r) {
  int st = 0;
  while (true) {
    const pid_t w = waitpid(sup, &st, killed ? 0 : WNOHANG);
    if (w == sup) break;
    if (w < 0 && errno != EINTR) break;
    if (!killed && std::chrono::steady_clock::now() >= deadline) {
      r.timed_out = true;
      kill_group(sup);
      killed = true;
      continue;
    }
    if (!killed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return st;
}
}  // namespace

std::string SandboxResult::describe() const {
  if (timed_out) return "timeout";
  if (output_limit) return "output limit";
  if (exit_code > 128) return "killed by signal " + std::to_string(exit_code - 128);
  return "exit " + std::to_string(exit_code);
}

Sandbox::Sandbox(SandboxLimits limits, bool require_isolation) : limits_(limits) {
  isolated_ = can_unshare();
  if (!isolated_ && require_isolation)
    throw_usage("sandbox: this process may not create network/PID/mount namespaces (run as root or where user "
                "namespaces are allowed), and isolation is required; --allow-unisolated runs programs with "
                "rlimits and a process group only");
}

std::string Sandbox::describe() const {
  std::string s = isolated_ ? "sandbox: network + PID + mount namespaces" : "sandbox: WARNING NO ISOLATION (process group "
                                                                            "and rlimits only: the programs can reach "
                                                                            "the network and write files)";
  if (isolated_ && geteuid() == 0) s += ", uid 65534";
  return s + "; timeout " + std::to_string(limits_.timeout_s) + " s, cpu " + std::to_string(limits_.cpu_seconds) +
         " s, address space " + std::to_string(limits_.address_space_mb) + " MB, file size " +
         std::to_string(limits_.file_size_mb) + " MB, processes " + std::to_string(limits_.processes);
}

SandboxResult Sandbox::run(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& files,
                           const std::string& stdin_text) const {
  WMTP_CHECK(!argv.empty(), "sandbox: empty command");
  ChildPlan c = plan_child(argv, limits_, isolated_);
  SandboxResult r;
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  try {
    prepare_child(c, files, stdin_text, out, err);
    const pid_t sup = start_supervisor(c, out, err);
    const Deadline deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limits_.timeout_s);
    read_streams(out[0], err[0], deadline, limits_.max_output_bytes, r);
    bool killed = r.timed_out || r.output_limit;
    if (killed) kill_group(sup);
    const int st = wait_supervisor(sup, deadline, killed, r);
    for (int fd : {out[0], err[0]})
      if (fd >= 0) close(fd);
    out[0] = err[0] = -1;
    killpg(sup, SIGKILL);  // anything left in the group (no-isolation mode: children that outlived it)
    r.exit_code = killed ? 128 + SIGKILL : status_code(st);
    if (r.exit_code == 125 || r.exit_code == 126)
      r.err += "\n[sandbox: could not set up the program's environment (status " + std::to_string(r.exit_code) + ")]";
  } catch (...) {
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) close(fd);
    std::error_code ec;
    fs::remove_all(c.work, ec);
    throw;
  }
  std::error_code ec;
  fs::remove_all(c.work, ec);
  return r;
}

}  // namespace wmtp
