// Helpers shared by every test binary: the MPI world of this test process, a scratch directory,
// and running programs from bin/ to check their exit codes and output.
#pragma once
#include <string>

#include "comm/mpi_env.h"
#include "core/config.h"

namespace wmtp::test {

MpiEnv& mpi();  // initialized by the test main before any test runs

// A fresh directory under the build tree's test-tmp/, unique per test name (and rank if asked).
std::string scratch_dir(const std::string& name);
// Collective: the same fresh directory for every rank of `comm` (rank 0 makes it, then a barrier).
std::string shared_scratch_dir(const std::string& name, MPI_Comm comm);

// Removes `path` and everything below it, if it exists (no error otherwise). Tests use this, not
// std::filesystem::remove_all: against PyTorch's pip LibTorch 2.x, remove_all of a non-empty
// directory crashed (jump to address 0) in test binaries; this walks the tree with POSIX nftw, so no
// C++ library code runs.
void remove_tree(const std::string& path);

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs a shell command line, capturing output. Only meant for single-rank use.
CommandResult run_command(const std::string& cmd);

// The whole file's bytes ("" for a file that cannot be opened).
std::string read_file(const std::string& path);

// Path of a program in bin/.
std::string bin(const std::string& program);
// Path under the source tree.
std::string source_path(const std::string& rel);
// A path under the tests' scratch folder (build/test-tmp), nothing created or removed.
std::string tmp_path(const std::string& name);
// The mpirun the MPI tests run under (CMake's WMTP_MPIEXEC).
std::string mpiexec();

// Sets one key of a component's config from its TOML spelling, as `--set` does
// (`set_config(sharding, "strategy=no_shard")`): tests that loop over a setting's spellings.
template <class C>
void set_config(C& cfg, const std::string& key_value) {
  ConfigSet set;
  set.add("c", cfg);
  set.apply_override("c." + key_value);
}

}  // namespace wmtp::test
