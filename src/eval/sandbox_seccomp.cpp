// The seccomp-BPF program of the sandbox, written against the kernel headers (no libseccomp).
#include "eval/sandbox_seccomp.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace wmtp {

namespace {
#if defined(__x86_64__)
constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
constexpr uint32_t kArch = 0;  // no filter: the numbers below are this build's, the check needs its arch
#endif

constexpr uint32_t kNewNamespaces = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                    CLONE_NEWPID | CLONE_NEWNET;
constexpr uint32_t kNr = offsetof(seccomp_data, nr);
constexpr uint32_t kArchOffset = offsetof(seccomp_data, arch);
constexpr uint32_t kArg0Low = offsetof(seccomp_data, args);  // little-endian: the low 32 bits come first

struct Call {
  long nr;
  const char* name;
};

// Refused outright: new namespaces, tracing other processes, the mount table, and kernel interfaces
// a program has no use for whose attack surface is large (eBPF, perf, keyrings, userfaultfd,
// io_uring) or that only an administrator uses.
const Call kRefused[] = {
    {SYS_unshare, "unshare"},
    {SYS_setns, "setns"},
    {SYS_ptrace, "ptrace"},
    {SYS_process_vm_readv, "process_vm_readv"},
    {SYS_process_vm_writev, "process_vm_writev"},
#ifdef SYS_pidfd_getfd
    {SYS_pidfd_getfd, "pidfd_getfd"},
#endif
    {SYS_mount, "mount"},
    {SYS_umount2, "umount2"},
    {SYS_pivot_root, "pivot_root"},
    {SYS_chroot, "chroot"},
#ifdef SYS_open_tree
    {SYS_open_tree, "open_tree"},
    {SYS_move_mount, "move_mount"},
    {SYS_fsopen, "fsopen"},
    {SYS_fsconfig, "fsconfig"},
    {SYS_fsmount, "fsmount"},
    {SYS_fspick, "fspick"},
#endif
#ifdef SYS_mount_setattr
    {SYS_mount_setattr, "mount_setattr"},
#endif
    {SYS_bpf, "bpf"},
    {SYS_perf_event_open, "perf_event_open"},
    {SYS_keyctl, "keyctl"},
    {SYS_add_key, "add_key"},
    {SYS_request_key, "request_key"},
    {SYS_userfaultfd, "userfaultfd"},
#ifdef SYS_io_uring_setup
    {SYS_io_uring_setup, "io_uring_setup"},
    {SYS_io_uring_enter, "io_uring_enter"},
    {SYS_io_uring_register, "io_uring_register"},
#endif
    {SYS_open_by_handle_at, "open_by_handle_at"},
    {SYS_kexec_load, "kexec_load"},
#ifdef SYS_kexec_file_load
    {SYS_kexec_file_load, "kexec_file_load"},
#endif
    {SYS_init_module, "init_module"},
    {SYS_finit_module, "finit_module"},
    {SYS_delete_module, "delete_module"},
    {SYS_reboot, "reboot"},
    {SYS_swapon, "swapon"},
    {SYS_swapoff, "swapoff"},
    {SYS_acct, "acct"},
    {SYS_quotactl, "quotactl"},
    {SYS_syslog, "syslog"},
#ifdef SYS_iopl
    {SYS_iopl, "iopl"},
    {SYS_ioperm, "ioperm"},
#endif
};

// Socket families a program may open: local sockets and the (empty) network namespace's IP and
// netlink. Others are not confined by a network namespace (AF_VSOCK reaches the hypervisor) or need
// privileges a program never has.
const int kSocketFamilies[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};

sock_filter stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return BPF_JUMP(code, k, jt, jf); }
}  // namespace

SeccompFilter make_seccomp_filter() {
  SeccompFilter f;
  if (kArch == 0) return f;
  const uint32_t eperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  auto& c = f.code;
  c.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArchOffset));
  c.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0));
  c.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));  // another ABI (i386 on x86_64)
  c.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kNr));
#if defined(__x86_64__)
  c.push_back(jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // the x32 ABI's numbers
  c.push_back(stmt(BPF_RET | BPF_K, eperm));
#endif
  for (const Call& call : kRefused) {
    c.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(call.nr), 0, 1));
    c.push_back(stmt(BPF_RET | BPF_K, eperm));
    f.summary += std::string(f.summary.empty() ? "" : ", ") + call.name;
  }
  // clone3 passes its flags in memory the filter cannot read: ENOSYS sends the C library to clone.
  c.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(SYS_clone3), 0, 1));
  c.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
  f.summary += ", clone3 (ENOSYS)";
  // socket(family, ...): only the families above.
  const auto families = static_cast<uint8_t>(sizeof kSocketFamilies / sizeof kSocketFamilies[0]);
  const auto past_block = static_cast<uint8_t>(families + 3);  // the load, the tests, the two returns
  c.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(SYS_socket), 0, past_block));
  c.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArg0Low));
  for (uint8_t i = 0; i < families; ++i)
    c.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(kSocketFamilies[i]),
                     static_cast<uint8_t>(families - i), 0));
  c.push_back(stmt(BPF_RET | BPF_K, eperm));
  c.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  f.summary += ", socket families other than unix, inet, inet6, netlink";
  // clone(flags, ...): no CLONE_NEW* flag.
  c.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kNr));
  c.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(SYS_clone), 0, 3));
  c.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArg0Low));
  c.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, kNewNamespaces, 0, 1));
  c.push_back(stmt(BPF_RET | BPF_K, eperm));
  c.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  f.summary += ", clone with CLONE_NEW*";
  return f;
}

bool install_seccomp_filter(const SeccompFilter& f) {
  if (f.code.empty()) {
    errno = ENOSYS;
    return false;
  }
  sock_fprog prog{static_cast<unsigned short>(f.code.size()), const_cast<sock_filter*>(f.code.data())};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

}  // namespace wmtp
