// The frame every program's main runs in: MPI start-up, command line (Boost.ProgramOptions) with
// the options every program shares, config loading, and the one place exceptions become exit codes.
//
//   int main(int argc, char** argv) {
//     wmtp::Program prog(argc, argv, {"train-baseline", "Fine-tune ...", "mpirun -np 8 bin/train-baseline -c x.toml"});
//     return prog.run([&](wmtp::ProgramContext& ctx) { ...; return 0; });
//   }
//
// Exit codes: 0 ok, 2 usage/config/input error, 1 runtime failure, 75 stopped on a signal ("resume
// me": after a checkpoint, or during start-up before any). Errors every rank hits identically (command line, config) exit cleanly
// with rank 0 printing the message once; any other error is printed with rank and host by the
// rank(s) that hit it, then MPI_Abort tears the whole job down so no peer hangs in a collective.
#pragma once
#include <boost/program_options.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "comm/mpi_env.h"

namespace wmtp {

class ConfigSet;
class StopSignals;

struct ProgramSpec {
  std::string name;     // "train-baseline"
  std::string purpose;  // one paragraph
  std::string example;  // one example command line
};

// Options every program with a config shares.
struct CommonOptions {
  std::string config_path;
  std::vector<std::string> sets;  // --set section.key=value, in order
  bool print_config = false;
  bool dry_run = false;
  int plan_world_size = 0;  // --world-size N for --dry-run (0: the real world size)
};

struct ProgramContext {
  MpiEnv& mpi;
  Logger log;
  boost::program_options::variables_map& vm;
  CommonOptions& common;
  StopSignals* signals = nullptr;  // with stop_on_signals(): the stop requests seen since start-up
};

class Program {
 public:
  Program(int argc, char** argv, ProgramSpec info);

  // Program-specific options; add before run().
  boost::program_options::options_description& options() { return options_; }
  // Positional arguments (e.g. subcommands): name and max count (-1: unbounded).
  void positional(const char* name, int max_count) { positional_.add(name, max_count); }
  // Adds --config/--set/--print-config/--dry-run/--world-size.
  void with_config_options();
  // SIGTERM/SIGUSR1 become stop requests (train/signals.h) from the program's first instruction, before
  // MPI start-up: a trainer polls them at its start-up phases and steps. Without it they terminate.
  void stop_on_signals() { stop_on_signals_ = true; }
  // Extra text printed by --help after the options (e.g. subcommands, config sections).
  void help_epilog(std::string text) { epilog_ = std::move(text); }

  // Parses, handles --help, runs `body`, maps exceptions to exit codes. Returns the exit code.
  int run(const std::function<int(ProgramContext&)>& body);

  // For programs with a config: loads --config and applies --set onto the registered structs; with
  // --print-config prints the resolved TOML (rank 0) and returns false (caller exits 0).
  static bool load_config(ProgramContext& ctx, ConfigSet& set);

 private:
  int argc_;
  char** argv_;
  ProgramSpec info_;
  boost::program_options::options_description options_;
  boost::program_options::positional_options_description positional_;
  std::string epilog_;
  bool config_options_ = false;
  bool stop_on_signals_ = false;
  CommonOptions common_;
};

}  // namespace wmtp
