// The safetensors container without LibTorch (so it can be fuzzed and built under ASan alone):
// dtype names, header parsing with full validation, header building, bounded raw reads.
//
// Layout (huggingface/safetensors): u64 little-endian N | N bytes of JSON header starting with '{'
// (padded with spaces) | data section. Header: {"__metadata__": {str: str}, "<name>": {"dtype": "F32",
// "shape": [...], "data_offsets": [begin, end]}, ...}; offsets are relative to the data section and
// must tile it exactly (sorted by begin: contiguous from 0, no gaps, no overlaps, no trailing bytes).
// Every bound is checked before anything is allocated or read; a malformed file is Error(Input)
// "<file>: <problem>".
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/store_dtype.h"

namespace wmtp {

enum class StDtype { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };
std::optional<StDtype> st_dtype_from_name(const std::string& name);  // nullopt: not supported here
const char* st_dtype_name(StDtype d);
StDtype st_dtype_of(StoreDtype d);  // the tag of what an export writes
int st_dtype_size(StDtype d);

inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;  // the reference implementation's limit

struct StEntry {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
  uint64_t nbytes() const { return end - begin; }
};

using StMetadata = std::vector<std::pair<std::string, std::string>>;

struct StHeader {
  std::vector<StEntry> entries;  // header order
  StMetadata metadata;
  uint64_t data_start = 0;  // 8 + N
  uint64_t data_size = 0;
  const StEntry* find(const std::string& name) const;
};

// Validates `header_json` (the N header bytes) against a file of `file_size` bytes whose header is
// N = header_json.size() long. `source` names the file in messages.
StHeader parse_safetensors_header(std::string_view header_json, uint64_t file_size, const std::string& source);
// Opens `path`, checks the length prefix against the file size and the limit, reads and parses.
StHeader read_safetensors_header(const std::string& path);

// Assigns offsets in the reference writer's order (dtype size descending, then name), and returns
// the header JSON padded with spaces so the data section starts 8-byte aligned (8 + N ≡ 0 mod 8).
// `entries` is reordered into that order. Throws Error(Usage) on duplicate names.
std::string build_safetensors_header(std::vector<StEntry>& entries, const StMetadata& metadata);

// Reads entry `e` of `path` (whose header is `h`) into `dst` (e.nbytes() bytes).
void read_safetensors_bytes(const std::string& path, const StHeader& h, const StEntry& e, void* dst);

// Product of `shape` with overflow checks (nullopt on overflow or a negative dimension).
std::optional<uint64_t> checked_numel(const std::vector<int64_t>& shape);

}  // namespace wmtp
