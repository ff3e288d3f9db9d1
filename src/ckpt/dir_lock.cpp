// One run per directory (see dir_lock.h).
#include "ckpt/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace wmtp {

namespace {

struct Holder {
  std::string host, job;
  long pid = -1;
};

// "host H pid P since T[ slurm job J]"
Holder parse_holder(const std::string& line) {
  Holder h;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    if (word == "host") in >> h.host;
    else if (word == "pid")
      in >> h.pid;
    else if (word == "job")
      in >> h.job;
  }
  return h;
}

std::string read_all(int fd) {
  std::string s;
  char buf[512];
  ssize_t n;
  off_t off = 0;
  while ((n = pread(fd, buf, sizeof(buf), off)) > 0) s.append(buf, size_t(n)), off += n;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

void write_holder(int fd, const std::string& path) {
  const std::string line = DirLock::holder_line() + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line.data(), line.size(), 0) != ssize_t(line.size()))
    throw_runtime("cannot write the lock file '", path, "': ", std::strerror(errno));
  fsync(fd);
}

[[noreturn]] void refuse(const std::string& dir, const std::string& key, const std::string& path,
                         const std::string& holder) {
  throw_usage(key, " '", dir, "' is in use by another run (", holder.empty() ? "holder unknown" : holder,
              "; lock file ", path, "). Two runs must not share it: give this one another ", key,
              ", or wait for the other to finish");
}

}  // namespace

std::string DirLock::holder_line() {
  char when[32];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::string line = "host " + host_name() + " pid " + std::to_string(getpid()) + " since " + when;
  if (const char* job = std::getenv("SLURM_JOB_ID")) line += std::string(" slurm job ") + job;
  return line;
}

DirLock::DirLock(const std::string& dir, const std::string& key)
    : path_((std::filesystem::path(dir) / "lock").string()) {
  std::error_code ec;
  const auto st = std::filesystem::status(path_, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw_usage(key, " '", dir, "': its lock file ", path_, " is ",
                std::filesystem::is_directory(st) ? "a directory" : "not a regular file",
                ", not a lock this toolkit wrote: remove it, or give this run another ", key);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_runtime("cannot create the lock file '", path_, "': ", std::strerror(errno));
  if (flock(fd_, LOCK_EX | LOCK_NB) == 0) {
    flocked_ = true;
    write_holder(fd_, path_);
    return;
  }
  const int err = errno;
  const std::string holder = read_all(fd_);
  if (err == EWOULDBLOCK) {
    ::close(fd_);
    fd_ = -1;
    refuse(dir, key, path_, holder);
  }
  if (err != ENOLCK && err != ENOSYS && err != EOPNOTSUPP && err != EINVAL) {
    ::close(fd_);
    fd_ = -1;
    throw_runtime("cannot lock '", path_, "': ", std::strerror(err));
  }
  // No flock on this file system: the holder line is the lock.
  if (!holder.empty()) {
    const Holder h = parse_holder(holder);
    const char* job = std::getenv("SLURM_JOB_ID");
    const bool same_job = job && !h.job.empty() && h.job == job;
    const bool dead_here = h.host == host_name() && h.pid > 0 && kill(pid_t(h.pid), 0) != 0 && errno == ESRCH;
    if (!same_job && !dead_here) {
      ::close(fd_);
      fd_ = -1;
      refuse(dir, key, path_, holder);
    }
  }
  write_holder(fd_, path_);
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  // Without flock the holder line is the lock: clear it. With flock, closing releases the lock; the
  // file stays (unlinking it would race with a run that has just opened it).
  if (!flocked_) (void)!ftruncate(fd_, 0);
  ::close(fd_);
}

}  // namespace wmtp
