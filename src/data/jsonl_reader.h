// Reading a rank's share of one or more JSONL files. The files are treated as one byte stream; rank r
// of W reads the lines that start in [r*S/W, (r+1)*S/W) (S = total bytes), so ranks read disjoint,
// contiguous line ranges of about equal size without anyone scanning the whole input first, and the
// concatenation of the ranks' lines in rank order is exactly the input in order.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace wmtp {

struct InputFile {
  std::string path;
  int64_t size = 0;  // bytes
};

// Stats every path. Throws Error(Input) for a missing/unreadable file or an empty one ("empty input").
std::vector<InputFile> stat_input_files(const std::vector<std::string>& paths);

// Position in the concatenated stream of the first line start at or after `pos` (a line starts at
// the beginning of each file and after each '\n'); total size when there is none.
int64_t next_line_start(const std::vector<InputFile>& files, int64_t pos);

struct ByteRange {
  int64_t begin = 0, end = 0;  // positions in the concatenated stream
};
ByteRange rank_byte_range(const std::vector<InputFile>& files, int rank, int world);

// Streams the lines of a byte range. Line numbers are 0-based within this range's part of each file
// (the caller turns them into file line numbers once it knows how many lines earlier ranks read).
class JsonlRangeReader {
 public:
  JsonlRangeReader(const std::vector<InputFile>& files, ByteRange range);
  // Next line without its '\n' (a trailing '\r' is kept; JSON treats it as whitespace).
  bool next(std::string& line, int& file_index, int64_t& line_in_part);
  // Lines read so far from each file.
  const std::vector<int64_t>& lines_per_file() const { return lines_per_file_; }
  int64_t bytes_read() const { return pos_ - range_.begin; }

 private:
  bool open_next_file();
  const std::vector<InputFile>& files_;
  ByteRange range_;
  int64_t pos_ = 0;         // current position in the concatenated stream
  int file_ = -1;           // index of the open file
  int64_t file_start_ = 0;  // stream position of file_'s first byte
  std::ifstream in_;
  std::vector<int64_t> lines_per_file_;
};

}  // namespace wmtp
