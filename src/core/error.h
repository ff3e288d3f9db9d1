// wmtp::Error — the one exception type of the library, with an exit-code class and context.
// Library code throws; each program's main (app/program.h) catches, logs with rank and host, and
// either exits (errors every rank hits identically, before any collective) or MPI_Aborts.
// Exit codes: 0 ok, 2 usage/config/input error, 1 runtime failure, 75 stopped on a signal (resume me).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace wmtp {

enum class ErrorKind {
  Usage,    // bad command line or config value: exit 2
  Input,    // bad input file (data, checkpoint, tokenizer): exit 2
  Runtime,  // anything else (MPI, HDF5 I/O, numerics): exit 1
};

int exit_code_for(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  // `agreed`: every rank throws this same error at the same point (bad command line or config,
  // parsed identically everywhere; or a failure the ranks agreed on by all-reduce). Such an error
  // exits cleanly with its code; any other error MPI_Aborts so no peer waits in a collective.
  Error(ErrorKind kind, const std::string& what, bool agreed = false)
      : std::runtime_error(what), kind_(kind), agreed_(agreed) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return exit_code_for(kind_); }
  bool agreed() const { return agreed_; }

 private:
  ErrorKind kind_;
  bool agreed_;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Build-and-throw helpers: throw_usage("unknown key '", key, "'").
template <class... Args>
[[noreturn]] void throw_usage(const Args&... args) {
  throw Error(ErrorKind::Usage, detail::concat(args...), /*agreed=*/true);
}
// An input error every rank has agreed on (by all-reduce) before throwing.
template <class... Args>
[[noreturn]] void throw_input_agreed(const Args&... args) {
  throw Error(ErrorKind::Input, detail::concat(args...), /*agreed=*/true);
}
template <class... Args>
[[noreturn]] void throw_input(const Args&... args) {
  throw Error(ErrorKind::Input, detail::concat(args...));
}
template <class... Args>
[[noreturn]] void throw_runtime(const Args&... args) {
  throw Error(ErrorKind::Runtime, detail::concat(args...));
}

// "file:line" prefix used by the check macros.
std::string source_location(const char* file, int line);

}  // namespace wmtp

// WMTP_CHECK(cond, msg...): an internal invariant; a failure is a runtime error naming file:line.
#define WMTP_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      ::wmtp::throw_runtime(::wmtp::source_location(__FILE__, __LINE__), ": check '" #cond \
                            "' failed: ", __VA_ARGS__);                                    \
  } while (0)
