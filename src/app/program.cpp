// Program frame: option parsing, --help, config loading and exception -> exit-code mapping.
#include "app/program.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <iostream>

#include "core/check.h"
#include "core/config.h"
#include "core/error.h"
#include "train/signals.h"
#include "comm/agree.h"

namespace po = boost::program_options;

namespace wmtp {

Program::Program(int argc, char** argv, ProgramSpec info)
    : argc_(argc), argv_(argv), info_(std::move(info)), options_("Options") {
  options_.add_options()("help,h", "print this help and exit")("version", "print the version and build flags");
}

void Program::with_config_options() {
  config_options_ = true;
  // One option per line:
  // clang-format off
  options_.add_options()
    ("config,c", po::value<std::string>(&common_.config_path), "TOML config file (see configs/)")
    ("set", po::value<std::vector<std::string>>(&common_.sets)->composing(),
     "override one config key: --set section.key=value (repeatable; applied after the file)")
    ("print-config", po::bool_switch(&common_.print_config), "print the fully resolved config as TOML and exit")
    ("dry-run", po::bool_switch(&common_.dry_run),
     "validate the config, print the shard plan and per-rank memory estimate, exit")
    ("world-size", po::value<int>(&common_.plan_world_size)->default_value(0, "0"),
     "with --dry-run: plan for N ranks (0 = the real world size)");
  // clang-format on
}

bool Program::load_config(ProgramContext& ctx, ConfigSet& set) {
  // A config file one node cannot read would stop that rank alone: one verdict for every rank.
  if (!ctx.common.config_path.empty()) agreed(ctx.mpi.world(), [&] { set.load_file(ctx.common.config_path); });
  set.apply_overrides(ctx.common.sets);
  if (ctx.common.print_config) {
    if (ctx.mpi.rank() == 0) {
      std::cout << set.to_toml();
      std::cout.flush();
    }
    return false;
  }
  return true;
}

namespace {
std::string build_flags() {
  std::string s = "wmtp " WMTP_VERSION;
#ifdef WMTP_WITH_CUDA
  s += " (CUDA+NCCL)";
#else
  s += " (CPU; built without CUDA/NCCL)";
#endif
  return s;
}
void check_common_options(const CommonOptions& c) {
  if (c.plan_world_size < 0) throw_usage("--world-size ", c.plan_world_size, ": expected a number of ranks >= 1");
  if (c.plan_world_size != 0 && !c.dry_run)
    throw_usage("--world-size ", c.plan_world_size,
                " only plans with --dry-run; a real run's world size is the number of ranks mpirun starts");
}

}  // namespace

int Program::run(const std::function<int(ProgramContext&)>& body) {
  // Stop requests first: a scheduler's signal during MPI start-up must not kill the job either.
  std::unique_ptr<StopSignals> signals;
  if (stop_on_signals_) signals = std::make_unique<StopSignals>();  // takes over a signal recorded before main
  else
    release_early_signals();
  // MPI next: every later failure can then name its rank, and abort the whole job.
  std::unique_ptr<MpiEnv> mpi;
  try {
    mpi = std::make_unique<MpiEnv>(&argc_, &argv_);
  } catch (const Error& e) {
    // A launch mistake (a launcher variable we cannot read, a launcher whose task count MPI does not
    // see) is a usage error: exit 2 like any other. Every task hits it alone, as a world of one.
    const char* what = e.kind() == ErrorKind::Runtime ? "MPI start-up failed: " : "";
    fprintf(stderr, "%s: error: %s%s\n", info_.name.c_str(), what, e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: error: MPI start-up failed: %s\n", info_.name.c_str(), e.what());
    return 1;
  }
  Logger log = mpi->logger();
  auto report = [&](const char* what, bool agreed) {
    // An agreed error is the same on every rank: say it once.
    if (agreed) {
      if (mpi->rank() == 0) fprintf(stderr, "%s: error: %s\n", info_.name.c_str(), what);
    } else {
      fprintf(stderr, "%s: [rank %d %s] error: %s\n", info_.name.c_str(), mpi->rank(), mpi->host().c_str(), what);
    }
    fflush(stderr);
  };

  try {
    po::variables_map vm;
    try {
      po::store(po::command_line_parser(argc_, argv_).options(options_).positional(positional_).run(), vm);
      if (vm.count("help")) {
        if (mpi->rank() == 0) {
          std::cout << info_.name << " — " << info_.purpose << "\n\nUsage: " << info_.name << " [options]\n\n"
                    << options_ << "\n";
          if (!epilog_.empty()) std::cout << epilog_ << "\n";
          std::cout << "Example:\n  " << info_.example << "\n\n"
                    << "Exit codes: 0 ok, 2 usage/config/input error, 1 runtime failure"
                    << (stop_on_signals_ ? ", 75 stopped by SIGTERM/SIGUSR1 (after a checkpoint, or during start-up "
                                           "before any; resume me)"
                                         : "")
                    << ".\n";
        }
        return 0;
      }
      if (vm.count("version")) {
        if (mpi->rank() == 0) std::cout << build_flags() << "\n";
        return 0;
      }
      po::notify(vm);
    } catch (const po::error& e) {
      throw_usage(e.what(), " (see ", info_.name, " --help)");
    }
    if (config_options_) check_common_options(common_);
    ProgramContext ctx{*mpi, log, vm, common_, signals.get()};
    return body(ctx);
  } catch (const Error& e) {
    report(e.what(), e.agreed());
    if (e.agreed() || mpi->world_size() == 1) return e.exit_code();
    mpi->abort(e.exit_code());
  } catch (const c10::Error& e) {
    report(e.what_without_backtrace(), false);
    if (mpi->world_size() == 1) return 1;
    mpi->abort(1);
  } catch (const std::exception& e) {
    report(e.what(), false);
    if (mpi->world_size() == 1) return 1;
    mpi->abort(1);
  }
}

}  // namespace wmtp
