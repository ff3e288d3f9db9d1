// DirLock: one run per directory. Two runs writing the same checkpoint directory delete each
// other's .tmp files and can commit each other's checkpoints; two sharing a run directory interleave
// one metrics.jsonl and overwrite each other's config.toml. The second one must not start.
//
// The lock is `dir/lock`, held with flock(2) for the lifetime of the object and naming its holder
// ("host H pid P since T", plus the Slurm job when there is one). The kernel drops an flock when
// its process dies, however it dies (kill -9, node reboot on a local disk; the file server's lease on
// NFS), so a crashed run leaves no stale lock. Where the file system refuses flock (some Lustre
// mounts), the holder line itself is the lock: a holder on this host whose pid is gone, or one from
// the same Slurm job (a requeued run), is stale and taken over; any other holder is refused.
// Local: one process (rank 0 of a run) takes it.
#pragma once
#include <string>

namespace wmtp {

class DirLock {
 public:
  // `key`: the config key that named the directory ("[checkpoint] dir"), for messages. Throws
  // Error(Usage) naming the holder and the lock file when another run holds the directory, or naming
  // the lock path when something other than a file is there (a directory); Error(Runtime) when the
  // lock file cannot be created.
  DirLock(const std::string& dir, const std::string& key);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& path() const { return path_; }
  // The holder line this process wrote ("host H pid P since T").
  static std::string holder_line();

 private:
  std::string path_;
  int fd_ = -1;
  bool flocked_ = false;
};

}  // namespace wmtp
