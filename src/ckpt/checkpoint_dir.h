// A run's checkpoint directory: atomic commit, the `latest` pointer, retention and resume.
//
//   dir/step_00000100.h5      complete checkpoints (only ever created by rename)
//   dir/step_00000150.h5.tmp  being written, or left by a writer that died: never complete
//   dir/latest                one line naming the newest committed checkpoint ("step_00000150.h5")
//
// Save protocol (every call collective over the run's communicator):
//   CheckpointDir cd(cfg.dir, comm);
//   std::string tmp = cd.begin_save(step);          // rank 0 creates dir; returns ".../step_N.h5.tmp"
//   { CheckpointWriter w(tmp, comm, header); ...; w.close(); }   // close() = MPI_File_sync + close
//   cd.commit(step, cfg.keep_last);                  // barrier; rank 0: fsync file, rename, fsync dir,
//                                                    // latest.tmp -> latest, fsync dir, retention
// A crash at any point leaves the previous checkpoint and `latest` intact: the new file only gets
// its final name after its bytes are on disk, and `latest` only names a renamed file.
// Resume: the newest complete checkpoint that opens as a wmtp checkpoint (rank 0 scans, broadcasts).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace wmtp {

// [checkpoint] table.
struct CheckpointConfig {
  std::string dir = "checkpoints/run";
  int64_t every = 0;        // save every N optimizer steps (0: only at the end)
  int64_t keep_last = 0;    // keep the newest K complete checkpoints (0: keep all)
  std::string resume = "auto";  // "auto" | "never" | path of a checkpoint file
  bool save_optimizer = true;   // include /optim (exp_avg, exp_avg_sq): needed to resume exactly
  bool lora_only = false;       // LoRA runs: save adapters (+ value head) only, with the base fingerprint
  bool save_final = true;       // save after the last step even when it is not a multiple of `every`
  bool save_best = false;       // also save whenever the validation loss improves on the run's best

  template <class V>
  void visit(V& v) {
    v.field("dir", dir, "directory for step_XXXXXXXX.h5 checkpoints and the `latest` pointer");
    v.field("every", every, "save every N optimizer steps (0 = only at the end)");
    v.field("keep_last", keep_last, "keep only the newest K checkpoints (0 = keep all)");
    v.field("resume", resume, "\"auto\" (newest complete checkpoint in dir, if any), \"never\", or a file path");
    v.field("save_optimizer", save_optimizer, "store AdamW moments (needed to resume exactly)");
    v.field("lora_only", lora_only, "LoRA runs: store adapters (+ value head) only, not the frozen base");
    v.field("save_final", save_final, "also save after the last step");
    v.field("save_best", save_best,
            "also save after each validation that improves on the lowest validation loss so far (kept across "
            "resumes; train-rho1's original cadence: set every = 0)");
  }
};

// Throws Error(Usage) for negative every/keep_last, empty dir or resume.
void validate_checkpoint_config(const CheckpointConfig& cfg);

std::string checkpoint_file_name(int64_t step);  // "step_00000123.h5"
// The step of a complete checkpoint's file name ("step_00000123.h5" -> 123); nullopt otherwise
// (including "*.h5.tmp").
std::optional<int64_t> parse_checkpoint_step(const std::string& file_name);

// Quick local check (one process, serial HDF5): the file opens and says format = wmtp-checkpoint.
bool is_valid_checkpoint_file(const std::string& path);

class CheckpointDir {
 public:
  CheckpointDir(std::string dir, MPI_Comm comm);  // MPI_COMM_NULL: one process

  const std::string& dir() const { return dir_; }
  std::string path_for(int64_t step) const;  // dir/step_N.h5
  std::string tmp_path_for(int64_t step) const;  // dir/step_N.h5.tmp

  // Collective. Creates the directory (rank 0) and returns the temporary path to write.
  std::string begin_save(int64_t step);
  // Collective, after the writer's close(). Renames the temporary file to its final name, points
  // `latest` at it, then applies retention (keep_last > 0): deletes older complete checkpoints beyond
  // the newest keep_last — never the one `latest` names — and stale *.tmp files of older steps.
  // Returns the final path.
  std::string commit(int64_t step, int64_t keep_last);

  // Rank 0 scans, the answer is broadcast (collective): newest complete, valid checkpoint, or "".
  std::string find_latest() const;
  // Local: steps of complete checkpoint files present, ascending.
  std::vector<int64_t> complete_steps() const;
  // Local: the file `latest` names ("" if absent or unreadable).
  std::string read_latest() const;

 private:
  std::string dir_;
  MPI_Comm comm_;
};

// Collective. The checkpoint to resume from: "never" -> ""; "auto" -> CheckpointDir(dir).find_latest()
// ("" when there is none); anything else is a path that must exist (Error(Usage) otherwise).
std::string resolve_resume_path(const CheckpointConfig& cfg, MPI_Comm comm);

}  // namespace wmtp
