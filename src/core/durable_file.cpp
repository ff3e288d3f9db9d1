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
  fsync_path(tmp, false);
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
    throw_runtime("cannot rename '", tmp, "' to '", final_path, "': ", std::strerror(errno));
  const std::filesystem::path parent = std::filesystem::path(final_path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string(), true);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw_runtime("cannot create '", tmp, "': ", std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw_runtime("cannot write '", tmp, "': ", std::strerror(ok ? errno : err));
  }
  try {
    commit_file(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace wmtp
