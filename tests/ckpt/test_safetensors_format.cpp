// The safetensors header parser against hostile input (no LibTorch: this file is also built into
// test_ckpt_safetensors_asan with AddressSanitizer). Every malformed header is Error(Input) naming
// the file and the problem; a seeded mutation loop checks that no input crashes the parser and that
// whatever it accepts satisfies the format's invariants.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "ckpt/safetensors_format.h"
#include "core/error.h"

namespace wmtp {
namespace {

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A file image: length prefix, header, `data_bytes` bytes of data.
std::string image(const std::string& header, uint64_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x5a');
}

std::string temp_path(const std::string& name) {
  const char* tmp = std::getenv("WMTP_TEST_TMP_DIR");
  return std::string(tmp ? tmp : "/tmp") + "/st_format_" + name;
}

std::string write_file(const std::string& name, const std::string& bytes) {
  std::string p = temp_path(name);
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  return p;
}

void expect_rejected(const std::string& name, const std::string& bytes, const std::string& fragment) {
  const std::string path = write_file(name, bytes);
  try {
    read_safetensors_header(path);
    ADD_FAILURE() << name << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << name << ": '" << msg << "' lacks '" << fragment << "'";
  }
  std::remove(path.c_str());
}

const std::string kGood =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},"c":{"dtype":"I64","shape":[],"data_offsets":[32,40]},)"
    R"("e":{"dtype":"U8","shape":[0,5],"data_offsets":[40,40]}})";

TEST(SafetensorsFormat, ValidHeaderParses) {
  const std::string path = write_file("good", image(kGood, 40));
  StHeader h = read_safetensors_header(path);
  ASSERT_EQ(h.entries.size(), 4u);
  EXPECT_EQ(h.entries[0].name, "a");
  EXPECT_EQ(h.entries[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.find("b")->dtype, StDtype::BF16);
  EXPECT_EQ(h.find("c")->shape.size(), 0u);
  EXPECT_EQ(h.data_start, 8 + kGood.size());
  EXPECT_EQ(h.metadata, (StMetadata{{"format", "pt"}}));
  char buf[8];
  read_safetensors_bytes(path, h, *h.find("b"), buf);
  EXPECT_EQ(std::string(buf, 8), std::string(8, '\x5a'));
  std::remove(path.c_str());
}

TEST(SafetensorsFormat, BuiltHeaderRoundTripsAndIsAligned) {
  std::vector<StEntry> entries = {{"z.bias", StDtype::BF16, {3}, 0, 0},
                                  {"a.weight", StDtype::F32, {2, 2}, 0, 0},
                                  {"m.ids", StDtype::I64, {2}, 0, 0},
                                  {"flag", StDtype::BOOL, {}, 0, 0}};
  const std::string header = build_safetensors_header(entries, {{"format", "pt"}});
  EXPECT_EQ((8 + header.size()) % 8, 0u);
  // Reference order: larger dtypes first, then by name.
  EXPECT_EQ(entries[0].name, "m.ids");
  EXPECT_EQ(entries[1].name, "a.weight");
  EXPECT_EQ(entries[2].name, "z.bias");
  EXPECT_EQ(entries[3].name, "flag");
  StHeader h = parse_safetensors_header(header, 8 + header.size() + entries.back().end, "mem");
  ASSERT_EQ(h.entries.size(), 4u);
  for (const auto& e : entries) {
    ASSERT_NE(h.find(e.name), nullptr);
    EXPECT_EQ(h.find(e.name)->begin, e.begin);
    EXPECT_EQ(h.find(e.name)->end, e.end);
  }
  std::vector<StEntry> dup = {{"x", StDtype::F32, {1}, 0, 0}, {"x", StDtype::F32, {1}, 0, 0}};
  EXPECT_THROW(build_safetensors_header(dup, {}), Error);
}

TEST(SafetensorsFormat, MalformedFilesAreRejectedWithTheCause) {
  const std::string t = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_rejected("tiny", "abc", "too small");
  expect_rejected("huge_len", le64(~uint64_t(0)) + t, "exceeds the limit");
  expect_rejected("big_len", le64(100'000'001) + t, "exceeds the limit");
  expect_rejected("len_past_eof", le64(5000) + t + "12345678", "runs past the end of the file");
  expect_rejected("not_brace", image("[" + t.substr(1), 8), "does not start with '{'");
  expect_rejected("bad_json", image(R"({"t":{"dtype":"F32",}})", 8), "invalid header JSON");
  expect_rejected("bad_utf8", image("{\"t\xff\":{}}", 8), "invalid header JSON");
  expect_rejected("deep",
                  image(std::string(1, '{') + "\"a\":" + std::string(2000, '[') + std::string(2000, ']') + "}", 0),
                  "invalid header JSON");
  expect_rejected(
      "dup_key",
      image(
          R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          8),
      "duplicate key 't'");
  expect_rejected("meta_nested", image(R"({"__metadata__":{"x":{"y":1}}})", 0), "not a string");
  expect_rejected("unknown_dtype", image(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8),
                  "unknown dtype 'F33'");
  expect_rejected("unsupported_dtype", image(R"({"t":{"dtype":"U16","shape":[4],"data_offsets":[0,8]}})", 8),
                  "U16 is not supported");
  expect_rejected("no_dtype", image(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8), "\"dtype\"");
  expect_rejected("neg_shape", image(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative");
  expect_rejected("float_shape", image(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
                  "non-negative integers");
  expect_rejected("offsets_arity", image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "[begin, end]");
  expect_rejected("offsets_reversed", image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
                  "end before");
  expect_rejected("offsets_past_data", image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
                  "run past the data section");
  expect_rejected("size_lie", image(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "needs 12 bytes");
  expect_rejected("overflow_shape",
                  image(R"({"t":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8),
                  "too large");
  expect_rejected(
      "overlap",
      image(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          12),
      "overlapping");
  expect_rejected(
      "gap",
      image(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
          12),
      "gap");
  expect_rejected("trailing", image(t, 16), "trailing bytes");
  expect_rejected("not_object", image(R"({"t":[1,2]})", 0), "not an object");
}

TEST(SafetensorsFormat, ReadOfATruncatedFileFails) {
  const std::string path = write_file("shrinks", image(kGood, 40));
  StHeader h = read_safetensors_header(path);
  write_file("shrinks", image(kGood, 20));  // the file changes under the reader
  char buf[24];
  EXPECT_THROW(read_safetensors_bytes(path, h, *h.find("a"), buf), Error);
  std::remove(path.c_str());
}

// Seeded byte mutations of a valid header: the parser never crashes, and whatever it accepts tiles
// the data section exactly with consistent sizes.
TEST(SafetensorsFormat, MutatedHeadersNeverCrash) {
  std::mt19937_64 rng(12345);
  const std::string charset = "{}[]\":,0123456789-eE.FIUB8_ \\u\xff\x80";
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string h = kGood;
    const int edits = 1 + int(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const size_t pos = rng() % h.size();
      switch (rng() % 3) {
        case 0: h[pos] = charset[rng() % charset.size()]; break;
        case 1: h.erase(pos, 1 + rng() % 3); break;
        default: h = h.substr(0, pos) + charset[rng() % charset.size()] + h.substr(pos); break;
      }
      if (h.empty()) h.push_back('{');
    }
    const uint64_t data = rng() % 64;
    try {
      StHeader parsed = parse_safetensors_header(h, 8 + h.size() + data, "mutant");
      uint64_t covered = 0;
      for (const auto& e : parsed.entries) {
        EXPECT_LE(e.end, parsed.data_size);
        EXPECT_EQ(e.nbytes(), *checked_numel(e.shape) * uint64_t(st_dtype_size(e.dtype)));
        covered += e.nbytes();
      }
      EXPECT_EQ(covered, parsed.data_size);
      ++accepted;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace wmtp
