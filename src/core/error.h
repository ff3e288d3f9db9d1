// wmtp::Error — the one exception type of the library, with an exit-code class and context.
// Library code throws; each program's main (app/program.h) catches, logs with rank and host, and
// either exits (errors every rank throws alike: Reach below) or MPI_Aborts (errors of one rank).
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

// Which ranks throw an error. A rank that throws before a collective its peers are already in
// leaves them waiting there until the job's time limit, so every throw says how far it reaches:
enum class Reach {
  Local,      // this rank's own finding: a file it opened or stat()ed, its disk, its node, its
              // memory. Another rank may have seen otherwise (a node-local path, a full local disk).
              // main MPI_Aborts the job; to get one message and a clean exit instead, make the
              // check inside agreed() (comm/agree.h), which turns it into Agreed on every rank.
  Identical,  // found by every rank at the same point from values they all hold alike: the command
              // line, the config, bytes every rank read from one file and checked the same way, or
              // a broadcast value. Every rank throws it; main exits cleanly, rank 0 prints it.
  Agreed,     // the ranks' common verdict after an all-reduce (comm/agree.h): every rank throws it.
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what, Reach reach = Reach::Local)
      : std::runtime_error(what), kind_(kind), reach_(reach) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return exit_code_for(kind_); }
  Reach reach() const { return reach_; }
  // Every rank throws this error at the same point (Identical or Agreed): main exits cleanly with
  // its code, without MPI_Abort.
  bool agreed() const { return reach_ != Reach::Local; }

 private:
  ErrorKind kind_;
  Reach reach_;
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
// A bad command line or config value (Identical: every rank parsed the same text). Never for a
// check of a file, a directory or this node's environment: those are Local (throw_input), made
// inside agreed() when the ranks must stay together.
template <class... Args>
[[noreturn]] void throw_usage(const Args&... args) {
  throw Error(ErrorKind::Usage, detail::concat(args...), Reach::Identical);
}
// Bad input found by this rank (Local).
template <class... Args>
[[noreturn]] void throw_input(const Args&... args) {
  throw Error(ErrorKind::Input, detail::concat(args...));
}
// Bad input every rank finds alike (Identical): checks of what every rank read from the same
// file the same way (a checkpoint's attributes, a tensor list), or of broadcast values.
template <class... Args>
[[noreturn]] void throw_input_identical(const Args&... args) {
  throw Error(ErrorKind::Input, detail::concat(args...), Reach::Identical);
}
// Bad input the ranks agreed on by a collective (an all-reduced verdict) before throwing (Agreed).
template <class... Args>
[[noreturn]] void throw_input_agreed(const Args&... args) {
  throw Error(ErrorKind::Input, detail::concat(args...), Reach::Agreed);
}
template <class... Args>
[[noreturn]] void throw_runtime(const Args&... args) {
  throw Error(ErrorKind::Runtime, detail::concat(args...));
}

// "file:line" prefix used by the check macros.
std::string source_location(const char* file, int line);

}  // namespace wmtp

// WMTP_CHECK(cond, msg...): an internal invariant; a failure is a runtime error naming file:line.
#define WMTP_CHECK(cond, ...)                                                                                          \
  do {                                                                                                                 \
    if (!(cond))                                                                                                       \
      ::wmtp::throw_runtime(::wmtp::source_location(__FILE__, __LINE__), ": check '" #cond "' failed: ", __VA_ARGS__); \
  } while (0)
