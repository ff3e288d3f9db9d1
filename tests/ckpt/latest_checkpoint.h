// The ckpt helper programs' way to find what a check reads: the newest complete checkpoint of a
// directory, as a resumed run would pick it (resolve_resume_path), or an input error.
#pragma once
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "core/error.h"

namespace wmtp::test {

// Collective over `comm`: the path of the newest complete checkpoint under `dir`.
inline std::string latest_checkpoint(MPI_Comm comm, const std::string& dir) {
  CheckpointConfig cfg;
  cfg.dir = dir;
  std::string path = resolve_resume_path(cfg, comm);
  if (path.empty()) throw_input("no complete checkpoint in ", dir);
  return path;
}

}  // namespace wmtp::test
