// Durable, atomic file commits: write `<final>.tmp`, then commit_file() makes its bytes durable
// (fsync), gives it its final name by rename (atomic on POSIX file systems) and makes the rename
// durable (fsync of the directory). A crash at any point leaves either the old file or the complete
// new one under the final name, never a partial one. Local (no MPI): one rank commits.
#pragma once
#include <string>

namespace wmtp {

// fsync a file or a directory by path. Directories on file systems that refuse fsync (EINVAL,
// EROFS) are accepted. Error(Runtime) naming the path and errno's text otherwise.
void fsync_path(const std::string& path, bool directory);

// fsync(tmp), rename(tmp, final_path), fsync(parent directory of final_path).
void commit_file(const std::string& tmp, const std::string& final_path);

// Writes `text` to `path` atomically and durably (through path + ".tmp").
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace wmtp
