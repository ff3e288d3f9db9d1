// TfRecordWriter and the record framing.
#include "track/tfrecord.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "track/crc32c.h"

namespace wmtp {

namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFF));
}

}  // namespace

std::string frame_tfrecord(const std::string& record) {
  std::string out;
  out.reserve(record.size() + 16);
  put_le(out, record.size(), 8);
  put_le(out, mask_crc32c(crc32c(out.data(), 8)), 4);
  out += record;
  put_le(out, mask_crc32c(crc32c(record.data(), record.size())), 4);
  return out;
}

TfRecordWriter::TfRecordWriter(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw_runtime("cannot create event file '", path, "': ", std::strerror(errno));
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    ::close(fd);
    throw_runtime("cannot open event file '", path, "': ", std::strerror(errno));
  }
}

TfRecordWriter::~TfRecordWriter() {
  if (file_) std::fclose(file_);
}

void TfRecordWriter::write(const std::string& record) {
  const std::string framed = frame_tfrecord(record);
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size())
    throw_runtime("cannot write event file '", path_, "': ", std::strerror(errno));
}

void TfRecordWriter::flush() {
  if (std::fflush(file_) != 0) throw_runtime("cannot write event file '", path_, "': ", std::strerror(errno));
}

}  // namespace wmtp
