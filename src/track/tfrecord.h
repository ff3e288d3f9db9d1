// TFRecord files, the container of TensorBoard event files. Each record is
//   uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// all little-endian. The writer creates its file exclusively (never appends to or overwrites an
// existing one) and leaves buffering to stdio; flush() hands the bytes to the OS so a TensorBoard
// watching the directory sees them.
#pragma once
#include <cstdio>
#include <string>

namespace wmtp {

class TfRecordWriter {
 public:
  // Throws Error(Runtime) naming the path if it exists or cannot be created.
  explicit TfRecordWriter(const std::string& path);
  ~TfRecordWriter();
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  void write(const std::string& record);  // throws Error(Runtime) on a short write
  void flush();                           // throws Error(Runtime) if the OS refuses the bytes
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// The framed bytes of one record (what write() appends).
std::string frame_tfrecord(const std::string& record);

}  // namespace wmtp
