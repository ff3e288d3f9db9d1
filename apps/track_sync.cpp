// track-sync: upload a run's metrics later, from a login node: metrics.jsonl + config.toml of each
// RUN_DIR into an MLflow store and/or a TensorBoard directory; running it twice adds nothing.
// Thin main over track/track_sync.h.
#include "app/program.h"
#include "ckpt/dir_lock.h"
#include "core/error.h"
#include "track/mlflow_store.h"
#include "track/track_sync.h"
#include "track/tracking_config.h"

namespace po = boost::program_options;

namespace {

// Whether a training still runs in `dir`: it holds the run directory's lock. A lock that cannot be
// taken for another reason (a read-only copy of the run) counts as running: a status is only ever
// set on a run known to have ended.
bool training_ended(const std::string& dir) {
  try {
    wmtp::DirLock probe(dir, "RUN_DIR");
    return true;
  } catch (const wmtp::Error&) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  wmtp::Program prog(argc, argv,
                     {"track-sync",
                      "Replay the metrics.jsonl and config.toml of finished or running training runs into an MLflow "
                      "store (file:///path/mlruns or http(s)://host:port) and/or a TensorBoard directory, for runs "
                      "whose compute nodes had no network or whose tracking server was down. Idempotent: MLflow gets "
                      "only the points its run does not hold yet (the run recorded in RUN_DIR/mlflow.json is "
                      "continued, or one is created and recorded there); TensorBoard gets one event file per run, "
                      "DIR/<run name>/events.out.tfevents.<t>.wmtp-sync, rewritten whole each time.",
                      "bin/track-sync runs/tiny/full runs/tiny/lora --mlflow http://mlflow.example.org:5000"});
  std::vector<std::string> run_dirs;
  std::string mlflow_uri, experiment = "wmtp", tensorboard_dir;
  double timeout = 30.0;
  // One option per line:
  // clang-format off
  prog.options().add_options()
    ("run-dir", po::value<std::vector<std::string>>(&run_dirs), "a run directory (positional, one or more)")
    ("mlflow", po::value<std::string>(&mlflow_uri), "MLflow tracking URI: file:///abs/path/mlruns or http(s)://host:port")
    ("experiment", po::value<std::string>(&experiment)->default_value(experiment),
     "MLflow experiment for runs not yet in the store (as [logging] mlflow_experiment)")
    ("tensorboard", po::value<std::string>(&tensorboard_dir), "TensorBoard directory: one subdirectory per run")
    ("timeout", po::value<double>(&timeout)->default_value(timeout), "seconds one MLflow request may take");
  // clang-format on
  prog.positional("run-dir", -1);
  prog.help_epilog(
      "The tracking server's credentials come from MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME and\n"
      "MLFLOW_TRACKING_PASSWORD, as for MLflow's own client. A run that is still training can be synced\n"
      "again later: only the new points are sent.\n");
  return prog.run([&](wmtp::ProgramContext& ctx) -> int {
    if (run_dirs.empty()) wmtp::throw_usage("no run directory given (see track-sync --help)");
    if (mlflow_uri.empty() && tensorboard_dir.empty())
      wmtp::throw_usage("nothing to do: give --mlflow URI and/or --tensorboard DIR");
    if (!(timeout > 0 && timeout <= wmtp::kMaxMlflowTimeoutSec))
      wmtp::throw_usage("--timeout ", timeout, ": expected seconds in (0, ", wmtp::kMaxMlflowTimeoutSec, "]");
    if (!mlflow_uri.empty()) {
      const wmtp::MlflowUri u = wmtp::parse_mlflow_uri(mlflow_uri);
      if (u.kind == wmtp::MlflowUri::Kind::Invalid)
        wmtp::throw_usage("--mlflow '", wmtp::redact_uri(mlflow_uri), "': ", u.problem);
    }
    if (ctx.mpi.rank() != 0) return 0;
    for (const std::string& dir : run_dirs) {
      if (!mlflow_uri.empty()) {
        const wmtp::SyncResult r = wmtp::sync_to_mlflow(dir, mlflow_uri, experiment, timeout, training_ended(dir));
        for (const std::string& w : r.warnings) ctx.log.warn("%s", w.c_str());
        ctx.log.info("%s -> MLflow %s run %s: %zu points, %zu sent (the run held the others)%s", dir.c_str(),
                     mlflow_uri.c_str(), r.where.c_str(), r.points, r.sent,
                     r.ended.empty() ? "" : ("; its training had ended: run marked " + r.ended).c_str());
      }
      if (!tensorboard_dir.empty()) {
        const wmtp::SyncResult r = wmtp::sync_to_tensorboard(dir, tensorboard_dir);
        if (mlflow_uri.empty())
          for (const std::string& w : r.warnings) ctx.log.warn("%s", w.c_str());
        ctx.log.info("%s -> %s: %zu points", dir.c_str(), r.where.c_str(), r.sent);
      }
    }
    return 0;
  });
}
