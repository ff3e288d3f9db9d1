// The sandbox against hostile programs: each is contained and scored a failure, nothing it started
// is left running, nothing is left in the scratch directory, no file appears outside it, no
// connection reaches the evaluator, and the evaluator goes on to run a benign program correctly.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "eval/sandbox.h"

#include "test_util.h"

namespace fs = std::filesystem;

namespace wmtp {
namespace {

// Processes whose command line mentions `marker`.
int count_processes(const std::string& marker) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(marker) != std::string::npos && std::to_string(getpid()) != name) ++n;
  }
  return n;
}

struct Hostile {
  const char* name;
  std::string code;
  const char* expect;  // what SandboxResult::describe() must say
};

TEST(Sandbox, HostileProgramsAreContained) {
  const fs::path scratch = fs::path(test::tmp_path("sandbox-scratch"));
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  setenv("TMPDIR", scratch.c_str(), 1);
  const fs::path outside = fs::path(test::tmp_path("sandbox-escape"));
  fs::remove(outside);

  // The evaluator's own listening socket on loopback: nothing may connect to it.
  const int lsock = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lsock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(lsock, 8), 0);
  socklen_t len = sizeof addr;
  getsockname(lsock, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);

  SandboxLimits lim;
  lim.timeout_s = 2.0;
  lim.max_output_bytes = 1 << 20;
  Sandbox box(lim, /*require_isolation=*/true);  // a machine without namespaces fails here, loudly
  std::printf("%s\n", box.describe().c_str());
  const std::string me = std::to_string(getpid());
  const Hostile table[] = {
      {"fork bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", "timeout"},
      {"busy loop", "while True:\n    pass\n", "timeout"},
      {"sleep past timeout", "import time\ntime.sleep(60)\n", "timeout"},
      {"100 GB allocation", "x = bytearray(100 * 2**30)\nprint('allocated')\n", "exit 1"},
      {"write outside its dir",
       "open('/tmp/escape', 'w').write('x')\nopen('" + outside.string() + "', 'w').write('x')\n", "exit 1"},
      {"socket to the evaluator",
       "import socket\ns = socket.create_connection(('127.0.0.1', " + std::to_string(port) + "), timeout=1)\n"
       "s.sendall(b'hello')\n", "exit 1"},
      {"kill its parent",
       "import os, signal, sys\nfor p in (os.getppid(), " + me + "):\n    try:\n        os.kill(p, signal.SIGKILL)\n"
       "    except Exception:\n        pass\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept Exception:\n    pass\n"
       "sys.exit(3)\n", "exit 3"},
      {"print 1 GB", "import sys\nb = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(b)\n", "output limit"},
      {"close stdout", "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(60)\n", "timeout"},
  };
  int i = 0;
  for (const Hostile& h : table) {
    const std::string marker = "hostile_" + me + "_" + std::to_string(i++) + ".py";
    const auto t0 = std::chrono::steady_clock::now();
    SandboxResult r = box.run({"python3", marker}, {{marker, h.code}}, "");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the kernel reaps a killed namespace
    const int left = count_processes(marker);
    std::printf("%-24s -> %-14s %.1f s, processes left %d, stderr tail: %s\n", h.name, r.describe().c_str(), s, left,
                r.err.substr(r.err.size() > 80 ? r.err.size() - 80 : 0).c_str());
    EXPECT_FALSE(r.ok()) << h.name << " scored a success";
    EXPECT_EQ(r.describe(), h.expect) << h.name;
    EXPECT_EQ(left, 0) << h.name << " left processes running";
    EXPECT_TRUE(fs::is_empty(scratch)) << h.name << " left files in the scratch directory";
  }
  EXPECT_FALSE(fs::exists(outside)) << "a program wrote outside its directory";
  EXPECT_FALSE(fs::exists("/tmp/escape")) << "a program wrote into the host's /tmp";
  EXPECT_LT(accept(lsock, nullptr, nullptr), 0) << "a program connected to the evaluator";
  close(lsock);

  // The evaluator is unaffected: a benign program with stdin runs and passes.
  SandboxResult ok = box.run({"python3", "ok.py"}, {{"ok.py", "print(input()[::-1])\n"}}, "abc\n");
  EXPECT_TRUE(ok.ok()) << ok.describe() << " " << ok.err;
  EXPECT_EQ(ok.out, "cba\n");
  SandboxResult fail = box.run({"python3", "f.py"}, {{"f.py", "assert 1 == 2\n"}}, "");
  EXPECT_EQ(fail.describe(), "exit 1");
}

}  // namespace
}  // namespace wmtp
