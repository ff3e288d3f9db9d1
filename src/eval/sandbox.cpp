// The sandbox, the evaluator's side: which isolation this process may use, the plan of one run (the
// program's root directory, environment, descriptors), the supervisor's fork (sandbox_child.h), the
// program's output, and the end of the run (its status, the timeout, the supervisor's report).
#include "eval/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "eval/sandbox_child.h"

extern char** environ;

namespace fs = std::filesystem;

namespace wmtp {

namespace {
// After SIGTERM the supervisor kills the program at once; this long later it is killed itself.
constexpr auto kStopGrace = std::chrono::seconds(10);

// What every program's root holds of the host, read-only.
const char* const kSystemTrees[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"};
// Host trees never bound, whatever the interpreter's path: the program gets fresh ones or none.
const char* const kNeverBound[] = {"/tmp", "/var/tmp", "/dev", "/proc", "/sys", "/run"};
const char* const kDevices[] = {"null", "zero", "full", "random", "urandom"};
// The evaluator's environment variables a program gets (HOME and TMPDIR are its own).
const char* const kKeptVariables[] = {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "LD_LIBRARY_PATH"};

// A descriptor closed when it goes out of scope.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

struct Pipe {
  Fd read, write;
  Pipe() {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) throw_runtime("sandbox: pipe: ", std::strerror(errno));
    read.fd = p[0];
    write.fd = p[1];
  }
};

bool within(const std::string& path, const std::string& tree) {
  return path == tree ||
         (path.size() > tree.size() && path.compare(0, tree.size(), tree) == 0 && path[tree.size()] == '/');
}

template <class List>
bool within_any(const std::string& path, const List& trees) {
  for (const auto& t : trees)
    if (within(path, t)) return true;
  return false;
}

// Where execvp would look for `name`: the name itself when it has a '/', else each PATH entry's
// (absolute paths).
std::vector<std::string> exec_candidates(const std::string& name) {
  if (name.find('/') != std::string::npos) return {fs::absolute(name).lexically_normal().string()};
  std::vector<std::string> out;
  const char* env = std::getenv("PATH");
  const std::string path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  for (size_t b = 0; b <= path.size();) {
    size_t e = path.find(':', b);
    if (e == std::string::npos) e = path.size();
    out.push_back(fs::absolute(fs::path(e > b ? path.substr(b, e - b) : ".") / name).lexically_normal().string());
    b = e + 1;
  }
  return out;
}

// The first candidate the evaluator may execute; "" when none.
std::string resolve_executable(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec) && access(c.c_str(), X_OK) == 0) return c;
  }
  return "";
}

// The trees an interpreter needs besides the system's: the directory above the one holding it (a
// virtual environment's root, a conda, pyenv or module installation's prefix), for its path as found
// and with symlinks resolved. (host path, path in the program's root) pairs, outermost only.
std::vector<std::pair<std::string, std::string>> interpreter_trees(const std::string& exec_path) {
  std::vector<std::pair<std::string, std::string>> out;
  if (exec_path.empty() || exec_path[0] != '/') return out;
  std::error_code ec;
  std::vector<fs::path> found = {exec_path};
  const fs::path real = fs::canonical(exec_path, ec);
  if (!ec) found.push_back(real);
  for (const fs::path& p : found) {
    const std::string target = p.parent_path().parent_path().string();
    const std::string source = fs::canonical(target, ec).string();
    if (ec || target == "/" || source == "/") continue;
    bool skip = false;
    for (const std::string& s : {target, source})
      skip = skip || within_any(s, kSystemTrees) || within_any(s, kNeverBound);
    for (const auto& o : out) skip = skip || within(target, o.second) || within(o.second, target);
    if (!skip) out.emplace_back(source, target);
  }
  return out;
}

// The program's root, built under kSandboxStaging (sandbox_child.h).
std::vector<MountStep> root_plan(const std::string& exec_path, const SandboxLimits& lim) {
  const std::string stage = kSandboxStaging;
  std::vector<MountStep> m;
  m.push_back({MountStep::Tmpfs, stage, "size=1m,nr_inodes=4096,mode=0755"});
  auto dirs = [&](const std::string& path) {
    std::string at;
    for (const auto& part : fs::path(path).relative_path()) {
      at += '/';
      at += part.string();
      m.push_back({MountStep::Dir, stage + at, ""});
    }
  };
  for (const char* t : kSystemTrees) {
    struct stat st {};
    if (lstat(t, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      const fs::path link = fs::read_symlink(t, ec);
      if (!ec) m.push_back({MountStep::Symlink, stage + t, link.string()});
    } else if (S_ISDIR(st.st_mode)) {
      dirs(t);
      m.push_back({MountStep::Bind, stage + t, t});
    }
  }
  for (const auto& [source, target] : interpreter_trees(exec_path)) {
    dirs(target);
    m.push_back({MountStep::Bind, stage + target, source});
  }
  dirs("/dev");
  for (const char* d : kDevices) {
    const std::string host = std::string("/dev/") + d;
    if (access(host.c_str(), F_OK) != 0) continue;
    m.push_back({MountStep::File, stage + host, ""});
    m.push_back({MountStep::Device, stage + host, host});
  }
  m.push_back({MountStep::Symlink, stage + "/dev/fd", "/proc/self/fd"});
  for (int i = 0; i < 3; ++i)
    m.push_back({MountStep::Symlink,
                 stage + "/dev/" +
                     (i == 0   ? "stdin"
                      : i == 1 ? "stdout"
                               : "stderr"),
                 "/proc/self/fd/" + std::to_string(i)});
  const std::string tmpfs = "size=" + std::to_string(lim.tmpfs_mb) + "m,nr_inodes=" + std::to_string(lim.tmpfs_files) +
                            ",mode=1777";
  for (const char* t : {"/dev/shm", "/tmp", "/var/tmp"}) {
    dirs(t);
    m.push_back({MountStep::Tmpfs, stage + t, tmpfs});
  }
  dirs("/proc");
  m.push_back({MountStep::Proc, stage + "/proc", ""});
  return m;
}

// The program's environment: kKeptVariables and PYTHON* of the evaluator's, HOME and TMPDIR its own.
std::vector<std::string> program_env(const std::string& home, const std::string& tmp) {
  std::vector<std::string> env;
  bool path = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string name = kv.substr(0, kv.find('='));
    bool keep = name.rfind("PYTHON", 0) == 0;
    for (const char* k : kKeptVariables) keep = keep || name == k;
    if (keep) env.push_back(kv);
    path = path || name == "PATH";
  }
  if (!path) env.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
  env.push_back("HOME=" + home);
  env.push_back("TMPDIR=" + tmp);
  return env;
}

std::vector<char*> views(std::vector<std::string>& store) {
  std::vector<char*> v;
  for (auto& s : store) v.push_back(s.data());
  v.push_back(nullptr);
  return v;
}

std::string id_map(unsigned id) { return std::to_string(id) + " " + std::to_string(id) + " 1\n"; }

// The namespaces this process may create, and whether the kernel takes the filter: tried in a child.
struct Probe {
  SandboxIsolation isolation = SandboxIsolation::None;
  bool seccomp = false;
};
Probe probe(const SeccompFilter& filter) {
  ChildPlan c;
  c.isolation = geteuid() == 0 ? SandboxIsolation::Namespaces : SandboxIsolation::UserNamespace;
  c.setgroups_deny = "deny";
  c.uid_map = id_map(geteuid());
  c.gid_map = id_map(getegid());
  const pid_t pid = fork();
  if (pid < 0) throw_runtime("sandbox: fork: ", std::strerror(errno));
  if (pid == 0)
    _exit((enter_namespaces(c) == 0 && can_mount_in_namespaces() ? 0 : 1) | (install_seccomp_filter(filter) ? 0 : 2));
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) continue;
  const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 3;
  return {(code & 1) == 0 ? c.isolation : SandboxIsolation::None, (code & 2) == 0};
}

using Clock = std::chrono::steady_clock;

// Reads stdout and stderr into `r` until both close (each fd reset as it closes), the deadline
// passes (r.timed_out) or the output passes its limit (r.output_limit).
void read_streams(Fd& out, Fd& err, Clock::time_point deadline, int64_t max_output_bytes, SandboxResult& r) {
  Fd* fds[2] = {&out, &err};
  std::string* sink[2] = {&r.out, &r.err};
  char buf[65536];
  while (out.fd >= 0 || err.fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      return;
    }
    pollfd pf[2] = {{out.fd, POLLIN, 0}, {err.fd, POLLIN, 0}};
    if (poll(pf, 2, static_cast<int>(std::min<int64_t>(left.count(), 100))) < 0 && errno != EINTR) return;
    for (int i = 0; i < 2; ++i) {
      if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = read(pf[i].fd, buf, sizeof buf);
      if (n <= 0) {
        fds[i]->reset();
        continue;
      }
      sink[i]->append(buf, static_cast<size_t>(n));
      if (static_cast<int64_t>(sink[i]->size()) > max_output_bytes) {
        r.output_limit = true;
        return;
      }
    }
  }
}

// Waits for the supervisor (the streams may close before it exits: a program that closed stdout). At
// the deadline, or at once when `stop`, it is asked to end the program (SIGTERM); kStopGrace later
// its group is killed. Returns its wait status.
int wait_supervisor(pid_t sup, Clock::time_point deadline, bool stop, SandboxResult& r) {
  Clock::time_point kill_at = Clock::time_point::max();
  auto ask_to_stop = [&] {
    kill(sup, SIGTERM);
    kill_at = Clock::now() + kStopGrace;
  };
  if (stop) ask_to_stop();
  int st = 0;
  while (true) {
    const pid_t w = waitpid(sup, &st, WNOHANG);
    if (w == sup) return st;
    if (w < 0 && errno != EINTR) return st;
    const auto now = Clock::now();
    if (kill_at == Clock::time_point::max() && now >= deadline) {
      r.timed_out = true;
      ask_to_stop();
    } else if (now >= kill_at) {
      killpg(sup, SIGKILL);
      kill(sup, SIGKILL);
      kill_at += std::chrono::hours(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The scratch directory of a run without isolation (under $TMPDIR, else /tmp), removed when the run
// ends however it ends.
struct Scratch {
  std::string path;
  void make() {
    const char* base = std::getenv("TMPDIR");
    std::string p = std::string(base && *base ? base : "/tmp") + "/wmtp-sandbox-XXXXXX";
    if (mkdtemp(p.data()) == nullptr) throw_runtime("sandbox: mkdtemp ", p, ": ", std::strerror(errno));
    path = p;
  }
  ~Scratch() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// What the program runs and where: its executable, argv, environment, and its root (isolated) or
// scratch directory. Returns the path the evaluator found for argv[0] ("" when none).
std::string plan_program(ChildPlan& c, const std::vector<std::string>& argv, Scratch& scratch) {
  const bool isolated = c.isolation != SandboxIsolation::None;
  // Isolated: the path the evaluator finds, whose installation the program's root then holds.
  // Without isolation the program sees the host as its uid (65534 when root): it searches PATH itself.
  const std::vector<std::string> candidates = exec_candidates(argv[0]);
  const std::string found = resolve_executable(candidates);
  c.exec_paths = isolated ? std::vector<std::string>{found.empty() ? candidates[0] : found} : candidates;
  c.argv_store = argv;
  if (isolated) {
    c.argv_store[0] = c.exec_paths[0];
    c.work = "/tmp/work";
    c.mounts = root_plan(c.exec_paths[0], c.lim);
    c.setgroups_deny = "deny";
    c.uid_map = id_map(geteuid());
    c.gid_map = id_map(getegid());
    c.env_store = program_env(c.work, "/tmp");
  } else {
    scratch.make();
    c.work = c.scratch = scratch.path;
    c.rm_store = {"rm", "-rf", "--one-file-system", "--", scratch.path};
    c.rm_argv = views(c.rm_store);
    c.env_store = program_env(c.work, c.work);
  }
  c.argv = views(c.argv_store);
  c.envp = views(c.env_store);
  return found;
}

// The supervisor's report, once it is gone: the program could not be executed (r.exec_error), or the
// sandbox could not be set up (Error(Runtime) naming the step).
void read_report(const Fd& report, const ChildPlan& c, const std::string& name, const std::string& found,
                 SandboxResult& r) {
  SandboxFailure f{};
  fcntl(report.fd, F_SETFL, O_NONBLOCK);  // a program killed before execve may still hold the pipe
  if (read(report.fd, &f, sizeof f) != static_cast<ssize_t>(sizeof f)) return;
  const std::string why = std::strerror(f.err);
  if (f.step == kStageExec) {
    std::string note;
    if (f.err == EACCES && c.drop_to_nobody) note = " (for uid 65534)";
    else if (found.empty())
      note = name.find('/') == std::string::npos ? " (not in the evaluator's PATH either)" : " (for the evaluator too)";
    const std::string what = c.exec_paths.size() == 1 ? c.exec_paths[0] : name + " (each PATH entry)";
    r.exec_error = "execve " + what + ": " + why + note;
  } else if (!r.timed_out) {
    const bool mount = f.step >= 0 && static_cast<size_t>(f.step) < c.mounts.size();
    const std::string step = mount ? c.mounts[static_cast<size_t>(f.step)].describe() : stage_name(f.step);
    throw_runtime("sandbox: could not set up the program's environment: ", step, ": ", why);
  }
}
}  // namespace

const char* stage_name(int32_t step) {
  switch (step) {
    case kStageUnshare: return "unshare (new namespaces)";
    case kStageIdMaps: return "writing /proc/self/uid_map, gid_map";
    case kStageFork: return "fork";
    case kStageMountNamespace: return "unshare (mount namespace)";
    case kStagePrivateMounts: return "making mounts private";
    case kStagePivotRoot: return "pivot_root into the new root";
    case kStageWorkDir: return "the program's directory";
    case kStageDropPrivileges: return "dropping to uid/gid 65534";
    case kStageWriteFiles: return "writing the program's files";
    case kStageStdio: return "stdin/stdout/stderr";
    case kStageSeccomp: return "installing the seccomp filter";
    case kStageExec: return "execve";
    default: return "set-up";
  }
}

std::string MountStep::describe() const {
  switch (kind) {
    case Dir: return "mkdir " + path;
    case Symlink: return "symlink " + path + " -> " + arg;
    case File: return "create " + path;
    case Bind: return "bind " + arg + " read-only on " + path;
    case Device: return "bind " + arg + " on " + path;
    case Tmpfs: return "tmpfs on " + path + " (" + arg + ")";
    case Proc: return "proc on " + path;
  }
  return path;
}

std::string SandboxResult::describe() const {
  if (timed_out) return "timeout";
  if (output_limit) return "output limit";
  if (!exec_error.empty()) return "cannot execute: " + exec_error;
  if (exit_code > 128) return "killed by signal " + std::to_string(exit_code - 128);
  return "exit " + std::to_string(exit_code);
}

Sandbox::Sandbox(SandboxLimits limits, bool require_isolation) : limits_(limits), filter_(make_seccomp_filter()) {
  const Probe p = probe(filter_);
  seccomp_ = p.seccomp;
  isolation_ = seccomp_ ? p.isolation : SandboxIsolation::None;
  if (!isolated() && require_isolation)
    throw_usage("sandbox: this process may not isolate generated programs: ",
                geteuid() == 0 ? "as root it needs to create network/PID/mount namespaces (CAP_SYS_ADMIN)"
                               : "as a user it needs user namespaces (sysctl kernel.unprivileged_userns_clone, "
                                 "user.max_user_namespaces)",
                seccomp_ ? "" : " and a seccomp filter (this kernel refuses it)",
                "; --allow-unisolated runs them with rlimits, a process group, a clean environment",
                seccomp_ ? ", a seccomp filter" : "", geteuid() == 0 ? " and uid 65534" : "",
                " only (see evaluate --help)");
}

std::string Sandbox::describe() const {
  const bool root = geteuid() == 0;
  std::string s;
  if (isolation_ == SandboxIsolation::Namespaces) {
    s = "sandbox: network + PID + mount namespaces (and IPC), a minimal read-only root, uid 65534, seccomp filter";
  } else if (isolation_ == SandboxIsolation::UserNamespace) {
    s = "sandbox: network + PID + mount namespaces (and IPC) in a user namespace (uid " + std::to_string(geteuid()) +
        ", no capabilities), a minimal read-only root, seccomp filter";
  } else {
    s = std::string("sandbox: WARNING NO ISOLATION (process group, rlimits, a clean environment") +
        (seccomp_ ? ", seccomp filter" : "") + (root ? ", uid 65534" : "") +
        " only: the programs can reach the network and read and write files)";
  }
  s += "; timeout " + std::to_string(limits_.timeout_s) + " s, cpu " + std::to_string(limits_.cpu_seconds) +
       " s, address space " + std::to_string(limits_.address_space_mb) + " MB, file size " +
       std::to_string(limits_.file_size_mb) + " MB, processes " + std::to_string(limits_.processes);
  if (!isolated())
    s += root ? " (of uid 65534)" : " (counted over every process of uid " + std::to_string(geteuid()) + ")";
  else
    s += ", tmpfs " + std::to_string(limits_.tmpfs_mb) + " MB";
  return s;
}

SandboxResult Sandbox::run(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& files,
                           const std::string& stdin_text) const {
  WMTP_CHECK(!argv.empty(), "sandbox: empty command");
  ChildPlan c;
  c.isolation = isolation_;
  c.drop_to_nobody = geteuid() == 0;
  c.lim = limits_;
  c.filter = seccomp_ ? &filter_ : nullptr;
  c.evaluator = getpid();
  c.files = &files;
  Scratch scratch;
  const std::string found = plan_program(c, argv, scratch);

  Fd in(memfd_create("wmtp-sandbox-stdin", MFD_CLOEXEC));
  if (in.fd < 0 || write(in.fd, stdin_text.data(), stdin_text.size()) != static_cast<ssize_t>(stdin_text.size()) ||
      lseek(in.fd, 0, SEEK_SET) != 0)
    throw_runtime("sandbox: stdin: ", std::strerror(errno));
  Pipe out, err, report;
  c.stdin_fd = in.fd;
  c.out_fd = out.write.fd;
  c.err_fd = err.write.fd;
  c.report_fd = report.write.fd;
  const pid_t sup = fork();
  if (sup < 0) throw_runtime("sandbox: fork: ", std::strerror(errno));
  if (sup == 0) run_supervisor(c);
  setpgid(sup, sup);  // also here: no window in which a kill of its group misses it
  in.reset();
  out.write.reset();
  err.write.reset();
  report.write.reset();

  SandboxResult r;
  const auto deadline = Clock::now() +
                        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits_.timeout_s));
  read_streams(out.read, err.read, deadline, limits_.max_output_bytes, r);
  const bool stopped = r.timed_out || r.output_limit;
  const int st = wait_supervisor(sup, deadline, stopped, r);
  r.exit_code = r.timed_out || r.output_limit ? 128 + SIGKILL : wait_status_code(st);
  read_report(report.read, c, argv[0], found, r);
  return r;
}

}  // namespace wmtp
