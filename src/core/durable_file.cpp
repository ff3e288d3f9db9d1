// Durable atomic file commits (see durable_file.h).
#include "core/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

AppendFile::AppendFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_runtime("cannot open '", path_, "' for appending: ", std::strerror(errno));
}

AppendFile::~AppendFile() { ::close(fd_); }

int64_t AppendFile::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_runtime("cannot stat '", path_, "': ", std::strerror(errno));
  return int64_t(st.st_size);
}

bool AppendFile::ends_mid_line() const {
  const int64_t n = size();
  if (n == 0) return false;
  const int rd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);  // fd_ is write-only
  if (rd < 0) throw_runtime("cannot read '", path_, "': ", std::strerror(errno));
  char last = 0;
  const ssize_t got = ::pread(rd, &last, 1, n - 1);
  ::close(rd);
  return got == 1 && last != '\n';
}

void AppendFile::drop_torn_line() {
  const int rd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (rd < 0) throw_runtime("cannot read '", path_, "': ", std::strerror(errno));
  int64_t keep = size();
  char buf[4096];
  while (keep > 0) {  // backwards, a block at a time, to the last '\n'
    const int64_t from = std::max<int64_t>(0, keep - int64_t(sizeof buf));
    const ssize_t got = ::pread(rd, buf, size_t(keep - from), from);
    if (got != keep - from) break;
    int64_t i = got - 1;
    while (i >= 0 && buf[i] != '\n') --i;
    if (i >= 0) {
      keep = from + i + 1;
      break;
    }
    keep = from;
  }
  ::close(rd);
  if (::ftruncate(fd_, keep) != 0) throw_runtime("cannot truncate '", path_, "': ", std::strerror(errno));
}

void AppendFile::append(const std::string& text, bool sync) {
  const int64_t before = size();
  const char* p = text.data();
  size_t left = text.size();
  int err = 0;
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    p += n;
    left -= size_t(n);
  }
  if (err == 0 && sync && ::fsync(fd_) != 0) err = errno;
  if (err == 0) return;
  // Nothing of this record stays: the file ends where the last complete one did.
  (void)!::ftruncate(fd_, before);
  throw_runtime("cannot write '", path_, "': ", std::strerror(err));
}

}  // namespace wmtp
