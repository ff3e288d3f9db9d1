// Error agreement: the one way ranks decide together that something failed, before any of them
// acts on it (project rule: "ranks agree on failures by all-reduce before acting").
//
// A rank that throws while its peers carry on would leave them waiting in the next collective until
// the job's time limit. So work that can fail on some ranks only (reading a file, writing one,
// rank 0's directory operations) runs inside `agreed` or `on_rank0`: every rank finishes its part,
// one all-reduce asks "did any rank fail?", and if one did, every rank throws the same Error — the
// message and kind (hence exit code) of the lowest failing rank, marked agreed, so rank 0 prints it
// once and every rank exits cleanly with the same code (app/program.h), without MPI_Abort.
//
//   auto reader = agreed(comm, [&] { return open_something(path); });   // value or agreed throw
//   on_rank0(comm, [&] { fs::rename(tmp, final); });                     // rank 0 acts, all agree
//
// Every function is collective over `comm`; MPI_COMM_NULL is one process (no communication).
#pragma once
#include <mpi.h>

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "comm/mpi_util.h"

namespace wmtp {

// Collective. `mine`: the error this rank hit, if any. nullopt on every rank when no rank failed;
// otherwise, on every rank, the lowest failing rank's error (message and kind), marked agreed.
std::optional<Error> agree_on_error(MPI_Comm comm, const std::optional<Error>& mine);

// Collective: throws agree_on_error's result when any rank failed.
void throw_if_any_failed(MPI_Comm comm, const std::optional<Error>& mine);

// The exception being handled as a wmtp::Error: its own kind for an Error, Runtime for anything else
// (std::bad_alloc, c10::Error, ...). Call only inside a catch block.
Error current_exception_as_error();

// Runs `fn` on every rank and returns its result; if `fn` threw on any rank, every rank throws the
// same agreed Error (see above) once all ranks have finished `fn`.
template <class Fn>
auto agreed(MPI_Comm comm, Fn&& fn) -> decltype(fn()) {
  using R = decltype(fn());
  std::optional<Error> err;
  if constexpr (std::is_void_v<R>) {
    try {
      fn();
    } catch (...) {
      err = current_exception_as_error();
    }
    throw_if_any_failed(comm, err);
  } else {
    std::optional<R> out;
    try {
      out.emplace(fn());
    } catch (...) {
      err = current_exception_as_error();
    }
    throw_if_any_failed(comm, err);
    return std::move(*out);
  }
}

// Runs `fn` on rank 0 only; its failure becomes the same agreed Error on every rank.
template <class Fn>
void on_rank0(MPI_Comm comm, Fn&& fn) {
  agreed(comm, [&] {
    if (comm_rank(comm) == 0) fn();
  });
}
}  // namespace wmtp
