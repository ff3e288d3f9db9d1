// A run's checkpoint directory: one run at a time, atomic commit, the `latest` pointer, retention
// and resume.
//
//   dir/step_00000100.h5          complete checkpoints (only ever created by rename)
//   dir/step_00000150.h5.tmp      being written, or left by a writer that died: never complete
//   dir/step_00000120.h5.corrupt  a checkpoint resume found damaged, moved aside (never deleted)
//   dir/latest                    one line naming the newest committed checkpoint ("step_00000150.h5")
//   dir/lock                      held (flock) by the run using the directory (dir_lock.h)
//
// Save protocol (every call collective over the run's communicator):
//   CheckpointDir cd(cfg.dir, comm);                // start-up: creates dir, checks it is writable,
//                                                   // takes the lock (agreed errors, exit 2)
//   std::string tmp = cd.begin_save(step);          // returns ".../step_N.h5.tmp"
//   { CheckpointWriter w(tmp, comm, header); ...; w.close(); }   // close() = MPI_File_sync + close
//   cd.commit(step, cfg.keep_last);                  // barrier; rank 0: fsync file, rename, fsync dir,
//                                                    // latest.tmp -> latest, fsync dir, retention
// A crash at any point leaves the previous checkpoint and `latest` intact: the new file only gets
// its final name after its bytes are on disk, and `latest` only names a renamed file.
// Resume: the newest complete checkpoint that opens, passes the run's checks and reads back whole
// (resume_checkpoint).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace wmtp {

class CheckpointReader;
class TrainState;

// [checkpoint] resume: the newest usable checkpoint of [checkpoint] dir, none (a fresh start), or the
// checkpoint file it names (any value other than kResumeModeNames').
enum class ResumeMode { Auto, Never, File };
inline const std::vector<std::string> kResumeModeNames = {"auto", "never"};

// [checkpoint] table.
struct CheckpointConfig {
  std::string dir = "checkpoints/run";
  int64_t every = 0;            // save every N optimizer steps (0: only at the end)
  int64_t keep_last = 0;        // keep the newest K complete checkpoints (0: keep all)
  std::string resume = "auto";  // "auto" | "never" | path of a checkpoint file: read it with resume_mode()
  bool save_optimizer = true;   // include /optim (exp_avg, exp_avg_sq): needed to resume exactly
  bool lora_only = false;       // LoRA runs: save adapters (+ value head) only, with the base fingerprint
  bool save_final = true;       // save after the last step even when it is not a multiple of `every`
  bool save_best = false;       // also save whenever the validation loss improves on the run's best

  template <class V>
  void visit(V& v) {
    v.field("dir", dir, "directory for step_XXXXXXXX.h5 checkpoints and the `latest` pointer");
    v.field("every", every, "save every N optimizer steps (0 = only at the end)");
    v.field("keep_last", keep_last, "keep only the newest K checkpoints (0 = keep all)");
    v.field("resume", resume,
            "\"auto\" (the newest complete checkpoint in dir whose checksums verify; an error when there are "
            "checkpoints but none is usable), \"never\" (start from scratch), or a file path");
    v.field("save_optimizer", save_optimizer, "store AdamW moments (needed to resume exactly)");
    v.field("lora_only", lora_only, "LoRA runs: store adapters (+ value head) only, not the frozen base");
    v.field("save_final", save_final, "also save after the last step");
    v.field("save_best", save_best,
            "also save after each validation that improves on the lowest validation loss so far (kept across "
            "resumes; train-rho1's original cadence: set every = 0)");
  }
  // What `resume` asks for, parsed from its one TOML string (a keyword, or a file's path).
  ResumeMode resume_mode() const;
};

// Throws Error(Usage) for negative every/keep_last, empty dir or resume.
void validate_checkpoint_config(const CheckpointConfig& cfg);

std::string checkpoint_file_name(int64_t step);  // "step_00000123.h5"
// The step of a complete checkpoint's file name ("step_00000123.h5" -> 123); nullopt otherwise
// (including "*.h5.tmp").
std::optional<int64_t> parse_checkpoint_step(const std::string& file_name);

// Quick local check (one process, serial HDF5): the file opens and says format = wmtp-checkpoint.
bool is_valid_checkpoint_file(const std::string& path);
// Local: the file name `latest` names in a checkpoint directory ("" if none), for reading another
// run's directory (a reference or critic model): no lock, nothing created.
std::string read_latest_name(const std::string& dir);
// Local: the checkpoint a setting that takes "a checkpoint file or a run's checkpoint directory"
// means: a directory resolves to the file its `latest` names, anything else is returned as is (its
// reader says what is wrong with it). A directory without a usable `latest` is an Error(Usage)
// naming `key` (e.g. "[rho1] reference"), Local: call it inside agreed() with several ranks.
std::string resolve_checkpoint_file(const std::string& path, const std::string& key);

class DirLock;

class CheckpointDir {
 public:
  // Collective (MPI_COMM_NULL: one process). Rank 0 creates the directory, checks that files can be
  // created in it and takes its lock, so an unusable directory or a second run on it fails at
  // start-up, not at the first save: an agreed Error(Usage) naming the directory and the cause.
  CheckpointDir(std::string dir, MPI_Comm comm);
  ~CheckpointDir();
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;

  const std::string& dir() const { return dir_; }
  std::string path_for(int64_t step) const;      // dir/step_N.h5
  std::string tmp_path_for(int64_t step) const;  // dir/step_N.h5.tmp

  // Collective. Creates the directory (rank 0) and returns the temporary path to write.
  std::string begin_save(int64_t step);
  // Collective, after the writer's close(). Renames the temporary file to its final name, points
  // `latest` at it, then applies retention (keep_last > 0): deletes older complete checkpoints beyond
  // the newest keep_last — never the one `latest` names — and stale *.tmp files of older steps.
  // Returns the final path.
  std::string commit(int64_t step, int64_t keep_last);

  // Collective: the checkpoint resume = "auto" takes (see resolve_resume_path), or "".
  std::string find_latest() const;
  // Local: steps of complete checkpoint files present, ascending.
  std::vector<int64_t> complete_steps() const;
  // Local: the file `latest` names ("" if absent or unreadable).
  std::string read_latest() const;

 private:
  std::string dir_;
  MPI_Comm comm_;
  std::unique_ptr<DirLock> lock_;  // rank 0
};

// What a resume does with a checkpoint it tries, every rank alike (both steps collective).
struct ResumeAttempt {
  // Whether the run may go on from this checkpoint, from what opening it read: the header and
  // attributes, /train (read and verified once), tensor names and shapes, but no tensor data. To
  // refuse it, throw: the error goes through, and no other checkpoint is tried.
  std::function<void(const CheckpointReader&, const TrainState&)> check;
  // Reads what the run restores (tensors verified as they are read, once). An agreed Error(Input)
  // here means a damaged file: under "auto" the next checkpoint is tried, so `load` must leave the
  // run in a state that loading another checkpoint restores whole.
  std::function<void(const CheckpointReader&, const TrainState&)> load;
};

// Collective. Resumes from the checkpoint [checkpoint] resume names through `attempt`, and returns
// its path ("" when there is none to resume from):
//   "never" -> "" (start from scratch);
//   a path  -> that file (it must exist: Error(Usage)); an error from it goes through;
//   "auto"  -> the newest complete checkpoint of cfg.dir that opens (its header and /train verified)
//              and loads. The file `latest` names comes first (the live lineage), then older ones,
//              newest first. A damaged one is renamed to *.corrupt, with a warning naming it and why,
//              and the previous one is tried. "" when the directory holds no complete checkpoint;
//              when it holds some but none is usable, an agreed Error(Input) naming each file and why
//              (exit 2): a run never starts over by accident.
std::string resume_checkpoint(const CheckpointConfig& cfg, MPI_Comm comm, const ResumeAttempt& attempt);

// Collective. The checkpoint resume_checkpoint would take when loading means verifying every
// checksum in the file (each rank checks a share of it), without restoring anything.
std::string resolve_resume_path(const CheckpointConfig& cfg, MPI_Comm comm);

}  // namespace wmtp
