// The sandbox against hostile programs (escapes, cheats, floods; docs/evaluate.md lists them): each
// is contained and scored a failure, nothing it started is left running, nothing it wrote reaches the
// host (its scratch, a world-writable directory, /run/lock, SysV shared memory), it cannot reach the
// evaluator (a socket, a host service's socket, /proc, the environment, the benchmark file), and the
// evaluator goes on to run a benign program correctly. As root, and as an unprivileged user (uid
// 65534 here): a user namespace gives it the same isolation.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "eval/sandbox.h"
#include "sandbox_test_util.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace wmtp {
namespace {

// What the evaluator's side of the table holds: a listening TCP socket on loopback, a host service's
// unix socket anyone may connect to, a world-writable directory (a cluster scratch or group-writable
// project directory), a world-readable "benchmark" file, secrets in the environment.
struct Host {
  fs::path scratch, shared, bench, unix_path;
  int tcp = -1, unix_sock = -1, port = 0;
  std::string me = std::to_string(getpid());
  key_t shm_key = static_cast<key_t>(0x57000000 | (getpid() & 0xffffff));

  Host() {
    scratch = test::tmp_path("sandbox-scratch");
    shared = test::tmp_path("sandbox-shared");
    bench = test::tmp_path("sandbox-bench.jsonl");
    unix_path = test::tmp_path("sandbox-service.sock");
    for (const fs::path& p : {scratch, shared}) {
      test::remove_tree(p.string());
      fs::create_directories(p);
    }
    chmod(scratch.c_str(), 0777);  // the unprivileged run's $TMPDIR too
    chmod(shared.c_str(), 0777);
    std::ofstream(bench) << "{\"task_id\": \"secret\", \"canonical_solution\": \"return 42\"}\n";
    chmod(bench.c_str(), 0644);
    setenv("TMPDIR", scratch.c_str(), 1);
    setenv("MLFLOW_TRACKING_TOKEN", "secret-token", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret-key", 1);
    setenv("SLURM_JOB_ID", "4242", 1);

    tcp = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(tcp, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(listen(tcp, 8), 0);
    socklen_t len = sizeof addr;
    getsockname(tcp, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);

    fs::remove(unix_path);
    unix_sock = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_un ua{};
    ua.sun_family = AF_UNIX;
    std::snprintf(ua.sun_path, sizeof ua.sun_path, "%s", unix_path.c_str());
    EXPECT_EQ(bind(unix_sock, reinterpret_cast<sockaddr*>(&ua), sizeof ua), 0) << unix_path;
    EXPECT_EQ(listen(unix_sock, 8), 0);
    chmod(unix_path.c_str(), 0777);
  }
  ~Host() {
    close(tcp);
    close(unix_sock);
    fs::remove(unix_path);
    const int id = shmget(shm_key, 0, 0);
    if (id >= 0) shmctl(id, IPC_RMID, nullptr);
    for (const char* v : {"MLFLOW_TRACKING_TOKEN", "AWS_SECRET_ACCESS_KEY", "SLURM_JOB_ID"}) unsetenv(v);
  }
  std::string run_lock() const { return "/run/lock/wmtp-escape-" + me; }
  std::string shared_file() const { return (shared / ("escape-" + me)).string(); }
};

struct Hostile {
  const char* name;
  std::string code;
  const char* expect;  // what SandboxResult::describe() must say
  // What the program left on the host, checked after it ran ("" when nothing).
  std::function<std::string()> left_behind = [] { return std::string(); };
};

// Every program exits 1 when what it tried failed (and 3 when it got through), unless it is stopped
// from outside (timeout, output limit, a signal).
std::vector<Hostile> hostile_table(const Host& h) {
  const std::string py_tail = "sys.exit(3 if got else 1)\n";
  return {
      {"fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
       "timeout"},
      {"busy loop", "while True:\n    pass\n", "timeout"},
      {"sleep past timeout", "import time\ntime.sleep(60)\n", "timeout"},
      {"close stdout and sleep", "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)\n", "timeout"},
      {"100 GB allocation", "x = bytearray(100 * 2**30)\nprint('allocated')\n", "exit 1"},
      {"print 1 GB", "import sys\nb = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(b)\n",
       "output limit"},
      {"a 100 MB file", "open('big', 'wb').write(b'x' * (100 << 20))\n", "exit 1"},  // Python ignores SIGXFSZ: EFBIG
      {"open 10000 descriptors", "import sys\ngot = [open('/dev/null') for _ in range(10000)]\n" + py_tail, "exit 1"},
      {"fill its directory (20 x 10 MB)",
       "import sys\ngot = 0\ntry:\n    for i in range(20):\n        open(f'f{i}', 'wb').write(b'x' * (10 << 20))\n"
       "        got += 10\nexcept OSError:\n    pass\nprint(got, 'MB')\ngot = got >= 200\n" +
           py_tail,
       "exit 1"},
      {"40000 files in /tmp",
       "import sys\ngot = 0\ntry:\n    for i in range(40000):\n        open(f'/tmp/n{i}', 'w').close()\n        got += "
       "1\n"
       "except OSError:\n    pass\nprint(got, 'files')\ngot = got >= 40000\n" +
           py_tail,
       "exit 1"},
      {"write outside its directory",
       "import sys\ngot = []\nfor p in ('" + h.shared_file() + "', '" + h.run_lock() +
           "'):\n    try:\n"
           "        open(p, 'w').write('x')\n        got.append(p)\n    except OSError:\n        pass\nprint(got)\n" +
           py_tail,
       "exit 1",
       [&h] {
         std::string s;
         for (const std::string& p : {h.shared_file(), h.run_lock()})
           if (fs::exists(p)) s += p + " ";
         return s;
       }},
      {"SysV shared memory that outlives it",
       "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
       "got = libc.shmget(" +
           std::to_string(h.shm_key) + ", 1 << 20, 0o1666) >= 0\nprint('segment', got)\n" + py_tail,
       "exit 3",
       [&h] { return shmget(h.shm_key, 0, 0) >= 0 ? std::string("a SysV segment on the host") : std::string(); }},
      {"socket to the evaluator",
       "import socket, sys\ntry:\n    socket.create_connection(('127.0.0.1', " + std::to_string(h.port) +
           "), timeout=1).sendall(b'hello')\n    got = True\nexcept OSError:\n    got = False\n" + py_tail,
       "exit 1"},
      {"a host service's unix socket",
       "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('" + h.unix_path.string() +
           "')\n    got = True\nexcept OSError:\n    got = False\n" + py_tail,
       "exit 1"},
      {"the evaluator's command line in /proc",
       "import sys\ntry:\n    got = open('/proc/" + h.me + "/cmdline').read()\nexcept OSError:\n    got = ''\n" +
           py_tail,
       "exit 1"},
      {"the benchmark file",
       "import sys\ntry:\n    got = 'canonical_solution' in open('" + h.bench.string() +
           "').read()\n"
           "except OSError:\n    got = False\n" +
           py_tail,
       "exit 1"},
      {"the evaluator's secrets in the environment",
       "import os, sys\ngot = [k for k in ('MLFLOW_TRACKING_TOKEN', 'AWS_SECRET_ACCESS_KEY', 'SLURM_JOB_ID') if k in "
       "os.environ]\n"
       "print(got)\n" +
           py_tail,
       "exit 1"},
      {"a user namespace to become root",
       "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\ngot = libc.unshare(0x10000000) == 0\n" + py_tail,
       "exit 1"},
      {"kill its parent and everything it can",
       "import os, signal, sys\nfor p in (os.getppid(), " + h.me +
           "):\n    try:\n        os.kill(p, signal.SIGKILL)\n"
           "    except Exception:\n        pass\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept Exception:\n    pass\n"
           "sys.exit(3)\n",
       "exit 3"},
  };
}

// Runs the table in `box`: one line per broken expectation (none: everything held).
std::vector<std::string> run_table(const Sandbox& box, const Host& h) {
  std::vector<std::string> broken;
  const std::vector<Hostile> table = hostile_table(h);
  for (size_t i = 0; i < table.size(); ++i) {
    const Hostile& t = table[i];
    const std::string marker = "hostile_" + h.me + "_" + std::to_string(i) + ".py";
    const SandboxResult r = box.run({"python3", marker}, {{marker, t.code}}, "");
    const int left = test::reap_marker(marker, 5.0);
    const std::string behind = t.left_behind();
    std::printf("%-44s -> %-20s processes left %d%s%s | %s\n", t.name, r.describe().c_str(), left,
                behind.empty() ? "" : ", left on the host: ", behind.c_str(), r.out.substr(0, 60).c_str());
    auto fail = [&](const std::string& what) { broken.push_back(std::string(t.name) + ": " + what); };
    if (r.ok()) fail("scored a success");
    if (r.describe() != t.expect) {
      std::string got = r.describe();
      got += " where '" + std::string(t.expect) + "' was expected (stderr: ";
      got += r.err.substr(r.err.size() > 200 ? r.err.size() - 200 : 0) + ")";
      fail(got);
    }
    if (left != 0) fail(std::to_string(left) + " processes left running");
    if (!behind.empty()) fail("left on the host: " + behind);
    if (!fs::is_empty(h.scratch)) fail("left files in $TMPDIR");
  }
  // The evaluator is unaffected: nothing connected to it, and a benign program with stdin runs and passes.
  if (accept(h.tcp, nullptr, nullptr) >= 0) broken.push_back("a program connected to the evaluator's socket");
  if (accept(h.unix_sock, nullptr, nullptr) >= 0) broken.push_back("a program connected to the host's unix socket");
  const SandboxResult ok = box.run({"python3", "ok.py"}, {{"ok.py", "print(input()[::-1])\n"}}, "abc\n");
  if (!ok.ok() || ok.out != "cba\n") broken.push_back("a benign program: " + ok.describe() + " " + ok.out + ok.err);
  const SandboxResult fail = box.run({"python3", "f.py"}, {{"f.py", "assert 1 == 2\n"}}, "");
  if (fail.describe() != "exit 1") broken.push_back("a failing assert: " + fail.describe());
  return broken;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

SandboxLimits table_limits() {
  SandboxLimits lim;
  lim.timeout_s = 2.0;
  lim.max_output_bytes = 1 << 20;
  return lim;
}

TEST(Sandbox, HostileProgramsAreContained) {
  Host h;
  Sandbox box(table_limits(), /*require_isolation=*/true);  // a machine without namespaces fails here, loudly
  std::printf("%s\n", box.describe().c_str());
  EXPECT_EQ(box.isolation(), geteuid() == 0 ? SandboxIsolation::Namespaces : SandboxIsolation::UserNamespace);
  const std::vector<std::string> broken = run_table(box, h);
  EXPECT_TRUE(broken.empty()) << join(broken);
}

// Cluster users are not root: as uid 65534 (no capabilities, no groups), the same table holds through a
// user namespace. Where the kernel refuses unprivileged user namespaces this test fails.
TEST(Sandbox, NonRootUsersGetTheSameIsolation) {
  Host h;
  const std::string verdict = test::in_child([&]() -> std::string {
    if (geteuid() == 0 && !test::become_nobody())
      return std::string("cannot become uid 65534: ") + std::strerror(errno);
    Sandbox box(table_limits(), /*require_isolation=*/true);
    std::printf("as uid %d: %s\n", static_cast<int>(geteuid()), box.describe().c_str());
    if (box.isolation() != SandboxIsolation::UserNamespace) return "not a user namespace: " + box.describe();
    return join(run_table(box, h));
  });
  EXPECT_EQ(verdict, "");
}

}  // namespace
}  // namespace wmtp
