// safetensors header validation, building and bounded reads (see safetensors_format.h).
#include "ckpt/safetensors_format.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/json.h"

namespace wmtp {

namespace {
struct DtypeRow {
  StDtype dtype;
  const char* name;
  int size;
};
const DtypeRow kDtypes[] = {{StDtype::F64, "F64", 8},   {StDtype::F32, "F32", 4}, {StDtype::F16, "F16", 2},
                            {StDtype::BF16, "BF16", 2}, {StDtype::I64, "I64", 8}, {StDtype::I32, "I32", 4},
                            {StDtype::I16, "I16", 2},   {StDtype::I8, "I8", 1},   {StDtype::U8, "U8", 1},
                            {StDtype::BOOL, "BOOL", 1}};
const DtypeRow* find_row(StDtype d) {
  for (const auto& r : kDtypes)
    if (r.dtype == d) return &r;
  return nullptr;
}
// Valid in the format but not supported by wmtp: named as such in errors.
const char* kOtherFormatDtypes[] = {"U16",     "U32", "U64", "F8_E5M2", "F8_E4M3",
                                    "F8_E8M0", "C64", "F4",  "F6_E2M3", "F6_E3M2"};

// Keys of the top-level object of already-validated JSON text, decoded, in order, duplicates kept:
// json::parse keeps only the last of duplicate keys, and the format forbids duplicates.
std::vector<std::string> top_level_keys(std::string_view text) {
  std::vector<std::string> keys;
  int depth = 0;
  bool expect_key = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      if (depth == 1 && expect_key) {
        keys.push_back(json::parse(text.substr(i, j - i + 1)).as_string());
        expect_key = false;
      }
      i = j;
    } else if (c == '{' || c == '[') {
      ++depth;
      if (depth == 1) expect_key = true;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 1) {
      expect_key = true;
    }
  }
  return keys;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Every header error names the file first; an entry's error names the tensor next.
template <class... A>
[[noreturn]] void fail(const std::string& source, const A&... what) {
  throw_input(source, ": ", what...);
}
template <class... A>
[[noreturn]] void fail_entry(const std::string& source, const std::string& key, const A&... what) {
  throw_input(source, ": tensor '", key, "': ", what...);
}

// The header's length against the limit and the file; checked before the header is read as well.
void check_header_length(uint64_t n, uint64_t file_size, const std::string& source) {
  if (n > kSafetensorsMaxHeader)
    fail(source, "header length ", n, " exceeds the limit of ", kSafetensorsMaxHeader, " bytes");
  if (file_size < 8 || n > file_size - 8)
    fail(source, "header length ", n, " runs past the end of the file (", file_size, " bytes)");
}

// The header text as a JSON object with distinct keys.
json::Value parse_header_object(std::string_view text, const std::string& source) {
  if (text.size() < 2 || text[0] != '{') fail(source, "header does not start with '{' (not a safetensors file?)");
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const Error& e) {
    fail(source, "invalid header JSON: ", e.what());
  }
  if (!root.is_object()) fail(source, "header is not a JSON object");
  std::set<std::string> keys;
  for (const auto& k : top_level_keys(text))
    if (!keys.insert(k).second) fail(source, "duplicate key '", k, "' in the header");
  return root;
}

StMetadata read_metadata(const json::Value& v, const std::string& source) {
  if (!v.is_object()) fail(source, "__metadata__ is not an object of strings");
  StMetadata metadata;
  for (const auto& [mk, mv] : v.as_object()) {
    if (!mv.is_string()) fail(source, "__metadata__ value of '", mk, "' is not a string");
    metadata.emplace_back(mk, mv.as_string());
  }
  return metadata;
}

StDtype read_dtype(const std::string& name, const std::string& key, const std::string& source) {
  if (auto d = st_dtype_from_name(name)) return *d;
  for (const char* other : kOtherFormatDtypes)
    if (name == other) fail_entry(source, key, "dtype ", other, " is not supported by wmtp");
  fail_entry(source, key, "unknown dtype '", name, "'");
}

StEntry read_entry(const std::string& key, const json::Value& v, uint64_t data_size, const std::string& source) {
  if (!v.is_object()) fail_entry(source, key, "header entry is not an object");
  const json::Value *dt = v.find("dtype"), *sh = v.find("shape"), *off = v.find("data_offsets");
  if (!dt || !dt->is_string()) fail_entry(source, key, "missing or non-string \"dtype\"");
  if (!sh || !sh->is_array()) fail_entry(source, key, "missing or non-array \"shape\"");
  if (!off || !off->is_array() || off->as_array().size() != 2)
    fail_entry(source, key, "\"data_offsets\" must be an array [begin, end]");
  StEntry e;
  e.name = key;
  e.dtype = read_dtype(dt->as_string(), key, source);
  for (const auto& x : sh->as_array()) {
    if (!x.is_int() || x.as_int() < 0) fail_entry(source, key, "shape entries must be non-negative integers");
    e.shape.push_back(x.as_int());
  }
  const auto& o = off->as_array();
  if (!o[0].is_int() || !o[1].is_int() || o[0].as_int() < 0 || o[1].as_int() < 0)
    fail_entry(source, key, "data_offsets must be non-negative integers");
  e.begin = uint64_t(o[0].as_int());
  e.end = uint64_t(o[1].as_int());
  // The offsets must hold exactly the bytes the shape and dtype need, inside the data section.
  if (e.end < e.begin) fail_entry(source, e.name, "data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  if (e.end > data_size)
    fail_entry(source, e.name, "data_offsets [", e.begin, ", ", e.end, "] run past the data section (", data_size,
               " bytes; file truncated?)");
  auto numel = checked_numel(e.shape);
  if (!numel || *numel > (uint64_t(1) << 60) / uint64_t(st_dtype_size(e.dtype)))
    fail_entry(source, e.name, "shape ", shape_text(e.shape), " is too large");
  const uint64_t need = *numel * uint64_t(st_dtype_size(e.dtype));
  if (need != e.nbytes())
    fail_entry(source, e.name, "shape ", shape_text(e.shape), " of ", st_dtype_name(e.dtype), " needs ", need,
               " bytes but data_offsets [", e.begin, ", ", e.end, "] hold ", e.nbytes());
  return e;
}

// The byte ranges must tile the data section: contiguous, no overlap, no gap, nothing after.
void check_entries_tile(const std::vector<StEntry>& entries, uint64_t data_size, const std::string& source) {
  std::vector<const StEntry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(),
                   [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  uint64_t pos = 0;
  for (const StEntry* e : order) {
    if (e->begin != pos)
      fail(source, "tensor '", e->name, "' starts at byte ", e->begin, " of the data section but the previous tensor ",
           "ends at ", pos, e->begin < pos ? " (overlapping data_offsets)" : " (gap in data_offsets)");
    pos = e->end;
  }
  if (pos != data_size)
    fail(source, "tensors cover ", pos, " bytes but the data section has ", data_size,
         " (trailing bytes or a lying header)");
}
}  // namespace

std::optional<StDtype> st_dtype_from_name(const std::string& name) {
  for (const auto& r : kDtypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

const char* st_dtype_name(StDtype d) { return find_row(d) ? find_row(d)->name : "?"; }

StDtype st_dtype_of(StoreDtype d) { return d == StoreDtype::BFloat16 ? StDtype::BF16 : StDtype::F32; }

int st_dtype_size(StDtype d) { return find_row(d) ? find_row(d)->size : 0; }

std::optional<uint64_t> checked_numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > (uint64_t(1) << 62) / uint64_t(d)) return std::nullopt;
    n *= uint64_t(d);
  }
  return n;
}

const StEntry* StHeader::find(const std::string& name) const {
  for (const auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

StHeader parse_safetensors_header(std::string_view text, uint64_t file_size, const std::string& source) {
  check_header_length(text.size(), file_size, source);
  const json::Value root = parse_header_object(text, source);
  StHeader h;
  h.data_start = 8 + text.size();
  h.data_size = file_size - h.data_start;
  for (const auto& [key, v] : root.as_object()) {
    if (key == "__metadata__") h.metadata = read_metadata(v, source);
    else
      h.entries.push_back(read_entry(key, v, h.data_size, source));
  }
  check_entries_tile(h.entries, h.data_size, source);
  return h;
}

StHeader read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input(path, ": cannot open (missing or unreadable)");
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  if (end < 0) throw_input(path, ": cannot determine the file size");
  const uint64_t size = uint64_t(end);
  if (size < 8) throw_input(path, ": file is too small (", size, " bytes) to be a safetensors file");
  in.seekg(0);
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  check_header_length(n, size, path);  // before allocating: a hostile length must not become a huge allocation
  std::string header(n, '\0');
  in.read(header.data(), std::streamsize(n));
  if (!in) throw_input(path, ": could not read the ", n, "-byte header");
  return parse_safetensors_header(header, size, path);
}

std::string build_safetensors_header(std::vector<StEntry>& entries, const StMetadata& metadata) {
  std::set<std::string> names;
  for (const auto& e : entries)
    if (!names.insert(e.name).second || e.name == "__metadata__")
      throw_usage("safetensors: duplicate or reserved tensor name '", e.name, "'");
  std::stable_sort(entries.begin(), entries.end(), [](const StEntry& a, const StEntry& b) {
    int sa = st_dtype_size(a.dtype), sb = st_dtype_size(b.dtype);
    return sa != sb ? sa > sb : a.name < b.name;
  });
  json::Value root = json::Value::object();
  if (!metadata.empty()) {
    json::Value m = json::Value::object();
    for (const auto& [k, v] : metadata) m.set(k, v);
    root.set("__metadata__", std::move(m));
  }
  uint64_t pos = 0;
  for (auto& e : entries) {
    auto numel = checked_numel(e.shape);
    if (!numel) throw_usage("safetensors: tensor '", e.name, "' has an invalid shape");
    e.begin = pos;
    e.end = pos + *numel * uint64_t(st_dtype_size(e.dtype));
    pos = e.end;
    json::Value shape = json::Value::array();
    for (int64_t d : e.shape) shape.push(d);
    json::Value offsets = json::Value::array();
    offsets.push(e.begin).push(e.end);
    json::Value entry = json::Value::object();
    entry.set("dtype", st_dtype_name(e.dtype)).set("shape", std::move(shape)).set("data_offsets", std::move(offsets));
    root.set(e.name, std::move(entry));
  }
  std::string text = json::dump(root);
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  return text;
}

void read_safetensors_bytes(const std::string& path, const StHeader& h, const StEntry& e, void* dst) {
  if (e.nbytes() == 0) return;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input(path, ": cannot open (missing or unreadable)");
  in.seekg(std::streamoff(h.data_start + e.begin));
  in.read(static_cast<char*>(dst), std::streamsize(e.nbytes()));
  if (!in || uint64_t(in.gcount()) != e.nbytes())
    throw_input(path, ": could not read tensor '", e.name, "' (file truncated since its header was read?)");
}

}  // namespace wmtp
