// The sandbox's seccomp filter: system calls a generated program has no use for and that reach
// kernel surface or undo the isolation are refused with EPERM (clone3 with ENOSYS, so the C
// library falls back to clone, whose namespace flags the filter can read). Built before fork
// (allocates), installed in the program's process just before execve (two prctl calls).
#pragma once
#include <linux/filter.h>

#include <string>
#include <vector>

namespace wmtp {

struct SeccompFilter {
  std::vector<sock_filter> code;
  // What it refuses, for the log and the docs: "unshare, setns, clone with CLONE_NEW*, ...".
  std::string summary;
};

// The filter for this architecture; an empty `code` where the architecture is not supported
// (x86_64 and aarch64 are).
SeccompFilter make_seccomp_filter();

// PR_SET_NO_NEW_PRIVS, then the filter (async-signal-safe: usable after fork). False when the
// kernel refuses it (errno set) or `f.code` is empty.
bool install_seccomp_filter(const SeccompFilter& f);

}  // namespace wmtp
