// Durable atomic file commits (see durable_file.h).
#include "core/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace wmtp {

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw_runtime("cannot open '", path, "' to fsync it: ", std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && !(directory && (err == EINVAL || err == EROFS)))
    throw_runtime("fsync('", path, "') failed: ", std::strerror(err));
}

void commit_file(const std::string& tmp, const std::string& final_path) {
  try {
    fsync_path(tmp, false);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw_runtime("cannot rename '", tmp, "' to '", final_path, "': ", std::strerror(err));
  }
  const std::filesystem::path parent = std::filesystem::path(final_path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string(), true);
}

DurableFile::DurableFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_runtime("cannot create '", tmp_, "': ", std::strerror(errno));
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!done_) std::remove(tmp_.c_str());
}

void DurableFile::write(const void* data, size_t bytes) {
  WMTP_CHECK(fd_ >= 0, "write to '", tmp_, "' after commit");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw_runtime("cannot write '", tmp_, "': ", std::strerror(n < 0 ? errno : ENOSPC));
    p += n;
    bytes -= size_t(n);
  }
}

void DurableFile::commit() {
  WMTP_CHECK(fd_ >= 0, "'", tmp_, "' committed twice");
  // fsync before close: the data must be on disk before the rename makes it the file (a rename
  // that reaches the disk first would leave an empty file under the final name after a crash).
  const int rc = ::fsync(fd_);
  const int err = errno;
  const int closed = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw_runtime("cannot write '", tmp_, "': fsync failed: ", std::strerror(err));
  if (closed != 0) throw_runtime("cannot write '", tmp_, "': close failed: ", std::strerror(errno));
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw_runtime("cannot rename '", tmp_, "' to '", path_, "': ", std::strerror(errno));
  done_ = true;
  const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  fsync_path(parent.empty() ? "." : parent.string(), true);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  DurableFile f(path);
  f.write(text);
  f.commit();
}

}  // namespace wmtp
