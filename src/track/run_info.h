// What a tracking backend records about a run besides its metrics: the run directory it belongs
// to, its name, the resolved configuration flattened into params, and tags saying what ran where.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace wmtp {

using StringPairs = std::vector<std::pair<std::string, std::string>>;

struct RunInfo {
  std::string run_dir;
  std::string program;      // "train-baseline"
  int world_size = 1;       // 0: not the training process itself (track-sync): no world size, host, job id
  int64_t start_step = 0;   // optimizer steps done before this invocation (0: a fresh run)
  std::string config_toml;  // the resolved configuration
};

// The run's display name: the last component of its run directory ("runs/tiny/lora" -> "lora").
std::string run_display_name(const std::string& run_dir);
// {"optimizer.lr", "0.01"}, ... for every key of the TOML text: strings bare, everything else as TOML
// writes it. Error(Input) naming `source` when the text is not TOML.
StringPairs flatten_config(const std::string& toml_text, const std::string& source);
// mlflow.user, mlflow.source.name/type, wmtp.program, wmtp.version, wmtp.run_dir and, from the
// training process, wmtp.world_size, wmtp.host, wmtp.slurm_job_id (when SLURM_JOB_ID is set).
StringPairs run_tags(const RunInfo& info);

}  // namespace wmtp
