// Helpers of the sandbox tests (sandbox_test_util.h).
#include "sandbox_test_util.h"

#include <dirent.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "eval/sandbox_seccomp.h"

namespace wmtp::test {

std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> found;
  DIR* d = opendir("/proc");
  if (d == nullptr) return found;
  while (const dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0 || pid == getpid()) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline", std::ios::binary);
    const std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(marker) != std::string::npos) found.push_back(pid);
  }
  closedir(d);
  return found;
}

int reap_marker(const std::string& marker, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<pid_t> left = processes_with(marker);
  while (!left.empty() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = processes_with(marker);
  }
  for (pid_t p : left) kill(p, SIGKILL);
  return static_cast<int>(left.size());
}

std::string in_child(const std::function<std::string()>& body) {
  int p[2];
  if (pipe(p) != 0) return std::string("pipe: ") + std::strerror(errno);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    close(p[0]);
    std::string verdict;
    try {
      verdict = body();
    } catch (const std::exception& e) {
      verdict = std::string("exception: ") + e.what();
    }
    std::fflush(stdout);
    const char* s = verdict.data();
    size_t n = verdict.size();
    while (n > 0) {
      const ssize_t w = write(p[1], s, n);
      if (w <= 0) break;
      s += w;
      n -= static_cast<size_t>(w);
    }
    _exit(0);
  }
  close(p[1]);
  std::string verdict;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) verdict.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) continue;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    verdict += "the child died (" + std::string(WIFSIGNALED(st) ? "signal " + std::to_string(WTERMSIG(st)) : "exit") +
               ")";
  return verdict;
}

bool become_nobody() {
  return setgroups(0, nullptr) == 0 && setresgid(65534, 65534, 65534) == 0 && setresuid(65534, 65534, 65534) == 0 &&
         prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0;
}

bool forbid_namespaces() { return install_seccomp_filter(make_seccomp_filter()); }

}  // namespace wmtp::test
