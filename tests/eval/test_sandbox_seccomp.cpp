// The sandbox's seccomp filter, one program per refused call: each makes the raw system call (after
// trying to gain a user and mount namespace, where the kernel's own privilege checks would then let
// the call through) and must see EPERM (clone3: ENOSYS). What programs need still works: threads,
// fork, subprocesses, sockets of the allowed families. And without namespaces (--allow-unisolated)
// the limits the banner prints apply: at most `processes` processes.
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "eval/sandbox.h"
#include "sandbox_test_util.h"
#include "test_util.h"

namespace wmtp {
namespace {

struct Refused {
  const char* call;
  long nr;
  std::string args;  // Python expressions
  int expect;
  bool gain;           // first try to become root in new user + mount namespaces
  std::string before;  // Python run before the call
  Refused(const char* c, long n, std::string a, int e = EPERM, bool g = true, std::string b = "")
      : call(c), nr(n), args(std::move(a)), expect(e), gain(g), before(std::move(b)) {}
};

std::string program(const Refused& t) {
  const std::string newuser_newns = std::to_string(CLONE_NEWUSER | CLONE_NEWNS);
  std::string py =
      "import ctypes, errno, os, sys\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "libc.syscall.restype = ctypes.c_long\n"
      "def call(nr, *a):\n"
      "    ctypes.set_errno(0)\n"
      "    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])\n"
      "    return r, ctypes.get_errno()\n";
  if (t.gain) py += "call(" + std::to_string(SYS_unshare) + ", " + newuser_newns + ")\n";
  py += t.before;
  py += "r, e = call(" + std::to_string(t.nr) + (t.args.empty() ? "" : ", " + t.args) + ")\n";
  if (t.nr == SYS_clone) py += "if r == 0:\n    os._exit(0)\nif r > 0:\n    os.waitpid(r, 0)\n";
  py += "print('returned', r, errno.errorcode.get(e, e))\n";
  py += "sys.exit(0 if (r == -1 and e == " + std::to_string(t.expect) + ") else 1)\n";
  return py;
}

std::vector<Refused> refused_calls() {
  const std::string sigchld = std::to_string(SIGCHLD);
  const std::string child = "kid = os.fork()\nif kid == 0:\n    import time\n    time.sleep(30)\n    os._exit(0)\n";
  std::vector<Refused> t = {
      {"unshare", SYS_unshare, std::to_string(CLONE_NEWUSER), EPERM, false},
      {"setns", SYS_setns, "-1, 0", EPERM, false},
      {"clone with CLONE_NEWUSER", SYS_clone, std::to_string(CLONE_NEWUSER) + " | " + sigchld + ", 0, 0, 0, 0", EPERM,
       false},
      {"clone3", SYS_clone3, "0, 0", ENOSYS, false},
      {"ptrace (attach to its own child)", SYS_ptrace, std::to_string(16) + ", kid, 0, 0", EPERM, false, child},
      {"process_vm_readv", SYS_process_vm_readv, "os.getpid(), 0, 0, 0, 0, 0", EPERM, false},
      {"process_vm_writev", SYS_process_vm_writev, "os.getpid(), 0, 0, 0, 0, 0", EPERM, false},
#ifdef SYS_pidfd_getfd
      {"pidfd_getfd", SYS_pidfd_getfd, "-1, 0, 0", EPERM, false},
#endif
      {"mount", SYS_mount, "b'none', b'/tmp', b'tmpfs', 0, 0"},
      {"umount2", SYS_umount2, "b'/tmp', 2"},
      {"pivot_root", SYS_pivot_root, "b'.', b'.'"},
      {"chroot", SYS_chroot, "b'/'"},
#ifdef SYS_open_tree
      {"open_tree", SYS_open_tree, "-100, b'/', 1"},
      {"move_mount", SYS_move_mount, "-1, b'', -1, b'', 0"},
      {"fsopen", SYS_fsopen, "b'tmpfs', 0"},
      {"fsconfig", SYS_fsconfig, "-1, 0, 0, 0, 0"},
      {"fsmount", SYS_fsmount, "-1, 0, 0"},
      {"fspick", SYS_fspick, "-100, b'/', 0"},
#endif
#ifdef SYS_mount_setattr
      {"mount_setattr", SYS_mount_setattr, "-1, b'', 0, 0, 0"},
#endif
      {"bpf", SYS_bpf, "0xffff, 0, 0", EPERM, false},
      {"perf_event_open", SYS_perf_event_open, "0, 0, -1, -1, 0", EPERM, false},
      {"keyctl (its session keyring)", SYS_keyctl, "0, -3, 0", EPERM, false},
      {"add_key", SYS_add_key, "0, 0, 0, 0, 0", EPERM, false},
      {"request_key", SYS_request_key, "0, 0, 0, 0", EPERM, false},
      {"userfaultfd (user mode only)", SYS_userfaultfd, "1", EPERM, false},
#ifdef SYS_io_uring_setup
      {"io_uring_setup", SYS_io_uring_setup, "1, 0", EPERM, false},
      {"io_uring_enter", SYS_io_uring_enter, "-1, 0, 0, 0, 0, 0", EPERM, false},
      {"io_uring_register", SYS_io_uring_register, "-1, 0, 0, 0", EPERM, false},
#endif
      {"open_by_handle_at", SYS_open_by_handle_at, "-1, 0, 0", EPERM, false},
      {"kexec_load", SYS_kexec_load, "0, 0, 0, 0", EPERM, false},
#ifdef SYS_kexec_file_load
      {"kexec_file_load", SYS_kexec_file_load, "-1, -1, 0, 0, 0", EPERM, false},
#endif
      {"init_module", SYS_init_module, "0, 0, b''", EPERM, false},
      {"finit_module", SYS_finit_module, "-1, b'', 0", EPERM, false},
      {"delete_module", SYS_delete_module, "b'wmtp_none', 0", EPERM, false},
      {"reboot", SYS_reboot, "0, 0, 0, 0", EPERM, false},
      {"swapon", SYS_swapon, "0, 0", EPERM, false},
      {"swapoff", SYS_swapoff, "0", EPERM, false},
      {"acct", SYS_acct, "0", EPERM, false},
      {"quotactl", SYS_quotactl, "0, 0, 0, 0", EPERM, false},
      {"syslog (the kernel log's size)", SYS_syslog, "10, 0, 0", EPERM, false},
#ifdef SYS_iopl
      {"iopl", SYS_iopl, "3", EPERM, false},
      {"ioperm", SYS_ioperm, "0, 1, 1", EPERM, false},
#endif
      {"socket(AF_VSOCK)", SYS_socket, std::to_string(AF_VSOCK) + ", " + std::to_string(SOCK_STREAM) + ", 0", EPERM,
       false},
      {"socket(AF_ALG)", SYS_socket, std::to_string(AF_ALG) + ", " + std::to_string(SOCK_SEQPACKET) + ", 0", EPERM,
       false},
      {"socket(AF_PACKET)", SYS_socket, std::to_string(AF_PACKET) + ", " + std::to_string(SOCK_RAW) + ", 0", EPERM,
       false},
  };
  return t;
}

TEST(SandboxSeccomp, EachRefusedCallIsRefused) {
  SandboxLimits lim;
  lim.timeout_s = 10.0;
  Sandbox box(lim, /*require_isolation=*/true);
  int refused = 0;
  const std::vector<Refused> calls = refused_calls();
  for (const Refused& t : calls) {
    const SandboxResult r = box.run({"python3", "call.py"}, {{"call.py", program(t)}}, "");
    std::printf("%-34s %s -> %s\n", t.call, r.out.empty() ? "(no output)\n" : r.out.c_str(), r.describe().c_str());
    EXPECT_TRUE(r.ok()) << t.call << " was not refused with errno " << t.expect << ": " << r.out << r.err;
    refused += r.ok() ? 1 : 0;
  }
  std::printf("%d of %zu calls refused by the filter\n", refused, calls.size());
}

// What programs use keeps working under the filter (clone3's ENOSYS sends glibc back to clone).
TEST(SandboxSeccomp, BenignProgramsStillRun) {
  SandboxLimits lim;
  lim.timeout_s = 20.0;
  Sandbox box(lim, /*require_isolation=*/true);
  const std::string code =
      "import os, socket, subprocess, sys, threading, multiprocessing\n"
      "out = []\n"
      "t = threading.Thread(target=lambda: out.append('thread'))\n"
      "t.start(); t.join()\n"
      "pid = os.fork()\n"
      "if pid == 0:\n    os._exit(7)\n"
      "assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7\n"
      "out.append(subprocess.run(['echo', 'subprocess'], capture_output=True, text=True).stdout.strip())\n"
      "with multiprocessing.Pool(2) as p:\n    assert p.map(abs, [-1, -2]) == [1, 2]\n"
      "a, b = socket.socketpair()\na.sendall(b'unix'); out.append(b.recv(4).decode())\n"
      "socket.socket(socket.AF_INET6).close()\n"
      "print(' '.join(out), os.cpu_count() > 0)\n";
  const SandboxResult r = box.run({"python3", "benign.py"}, {{"benign.py", code}}, "");
  std::printf("benign: %s %s%s\n", r.describe().c_str(), r.out.c_str(), r.err.c_str());
  EXPECT_TRUE(r.ok()) << r.err;
  EXPECT_EQ(r.out, "thread subprocess unix True\n");
}

// Where namespaces are refused (the filter installed in a child does that, as a container's default
// profile does), the refusal stands unless isolation is waived; then the banner's "processes 64" holds
// (as root: uid 65534's processes), and the program is stopped with everything in its group.
TEST(SandboxSeccomp, WithoutNamespacesTheBannersLimitsHold) {
  const std::string scratch = test::tmp_path("sandbox-unisolated");
  test::remove_tree(scratch);
  std::filesystem::create_directories(scratch);
  const std::string marker = "unisolated_" + std::to_string(getpid());
  const std::string verdict = test::in_child([&]() -> std::string {
    if (!test::forbid_namespaces()) return std::string("cannot install the filter: ") + std::strerror(errno);
    setenv("TMPDIR", scratch.c_str(), 1);
    SandboxLimits lim;
    lim.timeout_s = 20.0;
    try {
      Sandbox refused(lim, /*require_isolation=*/true);
      return "isolation was required and namespaces are refused, yet the sandbox was made: " + refused.describe();
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Usage) return std::string("not a usage error: ") + e.what();
      std::printf("required: %s\n", e.what());
    }
    Sandbox box(lim, /*require_isolation=*/false);
    std::printf("%s\n", box.describe().c_str());
    if (box.isolated() || box.describe().find("WARNING NO ISOLATION") == std::string::npos)
      return "not the unisolated sandbox: " + box.describe();
    const std::string code =
        "import os, sys, time\n"
        "n = 0\n"
        "for _ in range(200):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print(n, 'children')\n";
    const SandboxResult r = box.run({"python3", marker}, {{marker, code}}, "");
    std::printf("200 forks: %s, %s", r.describe().c_str(), r.out.c_str());
    std::string broken;
    const int children = std::atoi(r.out.c_str());
    if (!r.ok() || children < 1 || children >= lim.processes)
      broken += "forked " + std::to_string(children) + " children under 'processes " + std::to_string(lim.processes) +
                "' (" + r.describe() + r.err + ")\n";
    const int left = test::reap_marker(marker, 5.0);
    if (left != 0) broken += std::to_string(left) + " processes left running\n";
    if (!std::filesystem::is_empty(scratch)) broken += "left files in $TMPDIR\n";
    return broken;
  });
  EXPECT_EQ(verdict, "");
}

}  // namespace
}  // namespace wmtp
