// Rank byte ranges over concatenated JSONL files, aligned to line starts, and a streaming reader.
#include "data/jsonl_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace wmtp {

std::vector<InputFile> stat_input_files(const std::vector<std::string>& paths) {
  std::vector<InputFile> out;
  for (const auto& p : paths) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) throw_input(p, ": cannot open input (", std::strerror(errno), ")");
    if (!S_ISREG(st.st_mode)) throw_input(p, ": input is not a regular file");
    std::ifstream probe(p, std::ios::binary);
    if (!probe) throw_input(p, ": cannot read input");
    if (st.st_size == 0) throw_input(p, ": empty input (no lines)");
    out.push_back({p, static_cast<int64_t>(st.st_size)});
  }
  return out;
}

int64_t next_line_start(const std::vector<InputFile>& files, int64_t pos) {
  int64_t file_start = 0;
  for (const auto& f : files) {
    const int64_t file_end = file_start + f.size;
    if (pos <= file_start) return file_start;
    if (pos < file_end) {
      // A line starts at pos iff the byte before it is '\n'. Scan forward from pos-1 for a '\n'.
      std::ifstream in(f.path, std::ios::binary);
      if (!in) throw_input(f.path, ": cannot read input");
      in.seekg(pos - 1 - file_start);
      char buf[1 << 16];
      int64_t at = pos - 1;
      while (at < file_end) {
        in.read(buf, sizeof buf);
        std::streamsize got = in.gcount();
        if (got <= 0) break;
        const void* nl = std::memchr(buf, '\n', static_cast<size_t>(got));
        if (nl) return at + (static_cast<const char*>(nl) - buf) + 1;  // may equal file_end: next file
        at += got;
      }
      return file_end;  // no newline after pos: the next line starts with the next file
    }
    file_start = file_end;
  }
  return file_start;  // total size
}

ByteRange rank_byte_range(const std::vector<InputFile>& files, int rank, int world) {
  int64_t total = 0;
  for (const auto& f : files) total += f.size;
  auto boundary = [&](int r) -> int64_t {
    if (r <= 0) return 0;
    if (r >= world) return total;
    // 128-bit-safe split point: total * r / world without overflow for any realistic size.
    const int64_t split = static_cast<int64_t>(static_cast<__int128>(total) * r / world);
    return next_line_start(files, split);
  };
  return {boundary(rank), boundary(rank + 1)};
}

JsonlRangeReader::JsonlRangeReader(const std::vector<InputFile>& files, ByteRange range)
    : files_(files), range_(range), pos_(range.begin), lines_per_file_(files.size(), 0) {}

bool JsonlRangeReader::open_next_file() {
  // Find the file containing pos_ (files are ordered; skip any we are past).
  int64_t start = 0;
  for (size_t i = 0; i < files_.size(); ++i) {
    if (pos_ < start + files_[i].size) {
      in_.close();
      in_.clear();
      in_.open(files_[i].path, std::ios::binary);
      if (!in_) throw_input(files_[i].path, ": cannot read input");
      in_.seekg(pos_ - start);
      file_ = static_cast<int>(i);
      file_start_ = start;
      return true;
    }
    start += files_[i].size;
  }
  return false;
}

bool JsonlRangeReader::next(std::string& line, int& file_index, int64_t& line_in_part) {
  if (pos_ >= range_.end) return false;
  if (file_ < 0 || pos_ >= file_start_ + files_[file_].size) {
    if (!open_next_file()) return false;
  }
  std::getline(in_, line);
  if (in_.bad()) throw_input(files_[file_].path, ": read error");
  const int64_t file_end = file_start_ + files_[file_].size;
  // getline consumed the line and its '\n' (absent only at the end of a file without one).
  pos_ = std::min(file_end, pos_ + static_cast<int64_t>(line.size()) + 1);
  file_index = file_;
  line_in_part = lines_per_file_[file_]++;
  return true;
}

}  // namespace wmtp
