// What both checkpoint helper programs (ckpt_helper, ckpt_kill_writer) check first: the newest
// complete checkpoint of DIR as a resume would find it, or an input error when there is none.
#pragma once
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "core/error.h"

namespace wmtp {

inline std::string newest_complete_checkpoint(MPI_Comm comm, const std::string& dir) {
  CheckpointConfig cfg;
  cfg.dir = dir;
  const std::string path = resolve_resume_path(cfg, comm);
  if (path.empty()) throw_input("no complete checkpoint in ", dir);
  return path;
}

}  // namespace wmtp
