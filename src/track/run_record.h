// What a tracking backend records about a run besides its metrics: the run directory it belongs
// to, its name, the resolved configuration flattened into params, and tags saying what ran where.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wmtp {

using StringPairs = std::vector<std::pair<std::string, std::string>>;

struct RunRecord {
  std::string run_dir;
  std::string program;      // "train-baseline"
  int world_size = 1;       // 0: not the training process itself (track-sync): no world size, host, job id
  int64_t start_step = 0;   // optimizer steps done before this invocation (0: a fresh run)
  std::string config_toml;  // the resolved configuration
  // The file that keeps every point whatever a tracker does, named in the trackers' warnings:
  // <run_dir>/metrics.jsonl for a training run, OUTPUT/<checkpoint>/summary.json for evaluate; ""
  // for none (track-sync, which uploads from it).
  std::string points_file;
};

// The run's display name: the last component of its run directory ("runs/tiny/lora" -> "lora").
std::string run_display_name(const std::string& run_dir);
// {"optimizer.lr", "0.01"}, ... for every key of the TOML text: strings bare, everything else as TOML
// writes it. Error(Input) naming `source` when the text is not TOML.
StringPairs flatten_config(const std::string& toml_text, const std::string& source);
// mlflow.user, mlflow.source.name/type, wmtp.program, wmtp.version, wmtp.run_dir and, from the
// training process, wmtp.world_size, wmtp.host, wmtp.slurm_job_id (when SLURM_JOB_ID is set).
StringPairs run_tags(const RunRecord& info);
// Where the run's points are when a tracker misses them, for its warnings: "<points_file> has every
// point" and, for a training run's metrics.jsonl with `mlflow_uri`, the bin/track-sync command that
// uploads what MLflow missed. "" when the record names no file.
std::string points_kept_note(const RunRecord& run, const std::string& mlflow_uri = "");

}  // namespace wmtp
