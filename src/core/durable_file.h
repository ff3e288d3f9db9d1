// Durable, atomic file commits: write `<final>.tmp`, then make its bytes durable (fsync), give it
// its final name by rename (atomic on POSIX file systems) and make the rename durable (fsync of the
// directory). A crash or power loss at any point leaves either the old file or the complete new
// one under the final name, never a partial or empty one; a failure (a full disk) removes the
// temporary, leaving nothing but what was there before. Local (no MPI): one rank writes.
//
//   DurableFile f(path);          // creates path + ".tmp"
//   f.write(bytes, n); ...        // Error(Runtime) naming the file and errno's text
//   f.commit();                   // fsync, rename, fsync(dir); without it the destructor removes the .tmp
//
// Every file wmtp writes outside a checkpoint (exports, merges, `latest`, the dataset) goes through
// this, or through commit_file() for a .tmp written by other means (collective HDF5).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace wmtp {

// fsync a file or a directory by path. Directories on file systems that refuse fsync (EINVAL,
// EROFS) are accepted. Error(Runtime) naming the path and errno's text otherwise.
void fsync_path(const std::string& path, bool directory);

// fsync(tmp), rename(tmp, final_path), fsync(parent directory of final_path). On failure `tmp` is
// removed (unless the rename happened) and Error(Runtime) names the step and the file.
void commit_file(const std::string& tmp, const std::string& final_path);

class DurableFile {
 public:
  explicit DurableFile(std::string path);  // creates (truncates) path + ".tmp"
  ~DurableFile();                          // removes the temporary unless commit() succeeded
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(const std::string& text) { write(text.data(), text.size()); }
  void commit();  // close, then commit_file(tmp, path)
  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool done_ = false;  // committed: nothing to remove
};

// Writes `text` to `path` atomically and durably (a DurableFile).
void write_file_atomically(const std::string& path, const std::string& text);

// A file only ever appended to (a log of records, one a line: metrics.jsonl, MLflow's metric
// files) whose every append is all or nothing: a failed write (a full disk) truncates the file back
// to its size before, so it never ends in a torn record that a later append would run into.
// A writer killed mid-append can still leave one; ends_mid_line() tells, for the owner to decide.
class AppendFile {
 public:
  explicit AppendFile(std::string path);  // opens (creates) for appending; Error(Runtime)
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  bool ends_mid_line() const;  // not empty, and the last byte is not '\n'
  void drop_torn_line();       // truncates after the last '\n' (to empty when there is none)
  // All of `text` or nothing (Error(Runtime) naming the file and errno's text); `sync`: fsync too.
  void append(const std::string& text, bool sync);
  const std::string& path() const { return path_; }

 private:
  int64_t size() const;
  std::string path_;
  int fd_ = -1;
};

}  // namespace wmtp
