// The MLflow run that belongs to a wmtp run directory, in one store. Its id is kept in
// <run_dir>/mlflow.json (one entry per tracking URI), so a resumed training run, and later
// bin/track-sync, continue the same MLflow run instead of starting another. Metrics in MLflow only
// ever append, so points the run already holds are never sent again:
//   Use::Training: per key, only steps above the highest one the run holds (a resumed run
//                  recomputes the steps after its checkpoint: the first value stays);
//   Use::Sync:     per key, every step the run does not hold (fills gaps).
// What the run holds is read from the store for a continued run, and again for the keys of a batch
// whose delivery failed (a server may have written part of it before failing).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "track/mlflow_store.h"
#include "track/run_record.h"

namespace wmtp {

struct MlflowRunRecord {
  std::string tracking_uri, experiment_id, run_id;
};
// The record for `tracking_uri` in <run_dir>/mlflow.json, or an empty record.
MlflowRunRecord read_mlflow_record(const std::string& run_dir, const std::string& tracking_uri);
// Adds or replaces the record for its URI (atomic rewrite of mlflow.json).
void write_mlflow_record(const std::string& run_dir, const MlflowRunRecord& rec);

class MlflowRunLink {
 public:
  enum class Use {
    Training,  // continues the recorded run on a resume (info.start_step > 0), marking it RUNNING;
               // a fresh start creates a new one
    Sync,      // continues the recorded run if there is one, leaving its status alone
  };
  MlflowRunLink(MlflowStore& store, RunRecord info, std::string experiment, Use use);

  // Each throws MlflowError; a call after a failure picks up where the failed one stopped.
  void open();                                          // find or create the run, log its tags and params (idempotent)
  size_t log(const std::vector<MlflowMetric>& points);  // returns how many were sent
  void close(MlflowRunStatus status, int64_t end_ms = 0);  // end_ms 0: now

  const std::string& run_id() const { return run_id_; }
  bool continued() const { return continued_; }

 private:
  void load_state(const std::string& key);
  bool holds(const MlflowMetric& m) const;

  MlflowStore& store_;
  RunRecord info_;
  std::string experiment_;
  Use use_;

  // open()'s progress, so that a call after a failure resumes where it stopped
  bool resolved_ = false;  // params_/tags_ made; a recorded run to continue looked up
  StringPairs params_, tags_;
  std::string experiment_id_, run_id_;
  bool continued_ = false;  // the run existed before this process: unknown keys are read from the store
  bool recorded_ = false;   // run_id_ written to mlflow.json
  bool marked_running_ = false;
  bool opened_ = false;                             // tags and params logged
  std::map<std::string, int64_t> highest_;          // Training: keys whose state is known
  std::map<std::string, std::set<int64_t>> steps_;  // Sync: keys whose state is known
  std::set<std::string> stale_;                     // keys to read again from the store
};

}  // namespace wmtp
