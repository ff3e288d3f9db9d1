// Shared by the sandbox tests: processes found by a marker in their command line, and a piece of a
// test run in a forked child (as another user, without namespaces, as an evaluator to be killed),
// its verdict sent back through a pipe.
#pragma once
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace wmtp::test {

// Processes (other than this one) whose command line contains `marker`.
std::vector<pid_t> processes_with(const std::string& marker);
// Waits up to `seconds` for no process with `marker` to be left; SIGKILLs those still there (by pid,
// so a failing test leaves nothing behind) and returns how many there were.
int reap_marker(const std::string& marker, double seconds);

// Runs `body` in a forked child and returns what it returned ("" meaning success, by convention), or
// a line saying how the child died. The child's stdout goes where the test's goes.
std::string in_child(const std::function<std::string()>& body);

// In a forked child: become uid/gid 65534 with no groups and no capabilities, dumpable as a process
// a user started is. False (errno set) when this process is not root.
bool become_nobody();

// The sandbox's seccomp filter, installed in this process: it refuses unshare and clone with
// CLONE_NEW*, as a kernel or container that allows no namespaces does. False when refused.
bool forbid_namespaces();

}  // namespace wmtp::test
