// StartFootprint: what a trainer's start made on disk (its run_dir, checkpoint dir, their lock
// files), so that a start-up ending on an error (exit 2: a missing dataset or init_weights) leaves
// nothing behind, as README's exit table says. Rank 0 notes which of the directories and lock files
// exist before anything is created; after a failure, with the locks still held, it removes the lock
// files it added and the directories it created that are empty again. What existed before is kept.
#pragma once
#include <string>
#include <vector>

namespace wmtp {

class StartFootprint {
 public:
  explicit StartFootprint(const std::vector<std::string>& dirs);  // before anything is created
  // Never throws: it runs while an error is on its way out.
  void remove_created() const noexcept;

 private:
  std::vector<std::string> new_locks_;  // lock files that did not exist
  std::vector<std::string> new_dirs_;   // directories that did not exist, deepest first
};

}  // namespace wmtp
