// safetensors <-> at::Tensor: validated reading, streaming writing, sharded model directories.
#include "ckpt/safetensors.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/json.h"

namespace fs = std::filesystem;

namespace wmtp {

StDtype st_dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kDouble: return StDtype::F64;
    case at::kFloat: return StDtype::F32;
    case at::kHalf: return StDtype::F16;
    case at::kBFloat16: return StDtype::BF16;
    case at::kLong: return StDtype::I64;
    case at::kInt: return StDtype::I32;
    case at::kShort: return StDtype::I16;
    case at::kChar: return StDtype::I8;
    case at::kByte: return StDtype::U8;
    case at::kBool: return StDtype::BOOL;
    default: throw_usage("safetensors: tensors of dtype ", c10::toString(t.scalar_type()), " cannot be stored");
  }
}

c10::ScalarType scalar_type_of(StDtype d) {
  switch (d) {
    case StDtype::F64: return at::kDouble;
    case StDtype::F32: return at::kFloat;
    case StDtype::F16: return at::kHalf;
    case StDtype::BF16: return at::kBFloat16;
    case StDtype::I64: return at::kLong;
    case StDtype::I32: return at::kInt;
    case StDtype::I16: return at::kShort;
    case StDtype::I8: return at::kChar;
    case StDtype::U8: return at::kByte;
    case StDtype::BOOL: return at::kBool;
  }
  return at::kFloat;
}

// ---- reading ----

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)), header_(read_safetensors_header(path_)) {}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& e : header_.entries) out.push_back(e.name);
  return out;
}

const StEntry& SafetensorsFile::entry(const std::string& name) const {
  const StEntry* e = header_.find(name);
  if (!e) throw_input(path_, ": no tensor named '", name, "'");
  return *e;
}

at::Tensor SafetensorsFile::read(const std::string& name) const {
  const StEntry& e = entry(name);
  at::Tensor t = at::empty(e.shape, scalar_type_of(e.dtype));
  if (e.dtype == StDtype::BOOL) {
    // Bytes other than 0/1 are not valid bools: read as uint8 first and check.
    at::Tensor raw = at::empty(e.shape, at::kByte);
    read_safetensors_bytes(path_, header_, e, raw.data_ptr());
    if (raw.numel() > 0 && raw.max().item<int64_t>() > 1)
      throw_input(path_, ": BOOL tensor '", name, "' holds bytes other than 0/1");
    return raw.to(at::kBool);
  }
  read_safetensors_bytes(path_, header_, e, t.data_ptr());
  return t;
}

SafetensorsModel::SafetensorsModel(const std::string& path) : source_(path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw_input(path, ": no such file or directory");
  if (!fs::is_directory(path, ec)) {
    files_.emplace_back(path);
    for (const auto& n : files_[0].names()) where_[n] = 0;
    return;
  }
  const fs::path dir(path);
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    if (!fs::exists(dir / "model.safetensors"))
      throw_input(path, ": no model.safetensors or model.safetensors.index.json in this directory");
    files_.emplace_back((dir / "model.safetensors").string());
    for (const auto& n : files_[0].names()) where_[n] = 0;
    return;
  }
  std::ifstream in(index, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const Error& e) {
    throw_input(index.string(), ": ", e.what());
  }
  const json::Value* map = root.is_object() ? root.find("weight_map") : nullptr;
  if (!map || !map->is_object()) throw_input(index.string(), ": missing \"weight_map\" object");
  std::map<std::string, size_t> file_index;
  for (const auto& [name, file] : map->as_object()) {
    if (!file.is_string()) throw_input(index.string(), ": weight_map entry '", name, "' is not a file name");
    const std::string& f = file.as_string();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
      throw_input(index.string(), ": weight_map entry '", name, "' names '", f, "', not a file in this directory");
    auto it = file_index.find(f);
    if (it == file_index.end()) {
      if (!fs::exists(dir / f)) throw_input(index.string(), ": shard '", f, "' (for '", name, "') does not exist");
      files_.emplace_back((dir / f).string());
      it = file_index.emplace(f, files_.size() - 1).first;
    }
    if (!files_[it->second].contains(name))
      throw_input(index.string(), ": '", name, "' is mapped to '", f, "' but that file does not contain it");
    where_[name] = it->second;
  }
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [n, i] : where_) out.push_back(n);
  return out;
}

const StEntry& SafetensorsModel::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw_input(source_, ": no tensor named '", name, "'");
  return files_[it->second].entry(name);
}

at::Tensor SafetensorsModel::read(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw_input(source_, ": no tensor named '", name, "'");
  return files_[it->second].read(name);
}

// ---- writing ----

namespace {

// Removes `path` unless release()d: the no-partial-output guarantee on every error path.
class FileGuard {
 public:
  explicit FileGuard(std::string path) : path_(std::move(path)) {}
  ~FileGuard() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  void release() { path_.clear(); }

 private:
  std::string path_;
};

}  // namespace

void write_safetensors(const std::string& path, std::vector<StTensorSpec> tensors, const StFetch& fetch,
                       const StMetadata& metadata) {
  std::vector<StEntry> entries;
  for (auto& t : tensors) entries.push_back({t.name, t.dtype, t.shape, 0, 0});
  const std::string header = build_safetensors_header(entries, metadata);
  DurableFile out(path);  // a failure (a full disk) leaves no .tmp behind
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
  out.write(len, 8);
  out.write(header);
  for (const StEntry& e : entries) {
    at::Tensor t = fetch(e.name);
    if (st_dtype_of(t) != e.dtype || t.sizes().vec() != e.shape)
      throw_runtime("safetensors writer: tensor '", e.name, "' came back as ", c10::toString(t.scalar_type()),
                    " with another shape than announced");
    t = t.contiguous();
    out.write(t.data_ptr(), e.nbytes());
  }
  out.commit();
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const StMetadata& metadata) {
  std::vector<StTensorSpec> infos;
  std::map<std::string, at::Tensor> by_name;
  for (const auto& [name, t] : tensors) {
    infos.push_back({name, st_dtype_of(t), t.sizes().vec()});
    by_name[name] = t;
  }
  write_safetensors(
      path, infos, [&](const std::string& n) { return by_name.at(n); }, metadata);
}

std::vector<std::string> write_safetensors_model(const std::string& dir, const std::vector<StTensorSpec>& tensors,
                                                 const StFetch& fetch, uint64_t max_shard_bytes,
                                                 const std::string& stem) {
  std::vector<std::vector<StTensorSpec>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    const uint64_t bytes = checked_numel(t.shape).value_or(0) * uint64_t(st_dtype_size(t.dtype));
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(t);
    in_shard += bytes;
    total += bytes;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::vector<std::string> written;
  std::vector<std::unique_ptr<FileGuard>> guards;  // remove what was written if a later shard fails
  if (shards.size() == 1) {
    const std::string name = stem + ".safetensors";
    write_safetensors((fs::path(dir) / name).string(), shards[0], fetch);
    return {name};
  }
  json::Value weight_map = json::Value::object();
  std::map<std::string, std::string> sorted_map;
  for (size_t k = 0; k < shards.size(); ++k) {
    char name[256];
    snprintf(name, sizeof(name), "%s-%05zu-of-%05zu.safetensors", stem.c_str(), k + 1, shards.size());
    const std::string full = (fs::path(dir) / name).string();
    write_safetensors(full, shards[k], fetch);
    guards.push_back(std::make_unique<FileGuard>(full));
    written.push_back(name);
    for (const auto& t : shards[k]) sorted_map[t.name] = name;
  }
  for (const auto& [t, f] : sorted_map) weight_map.set(t, f);
  json::Value meta = json::Value::object();
  meta.set("total_size", int64_t(total));
  json::Value root = json::Value::object();
  root.set("metadata", std::move(meta)).set("weight_map", std::move(weight_map));
  const std::string index = (fs::path(dir) / (stem + ".safetensors.index.json")).string();
  write_file_atomically(index, json::dump(root) + "\n");
  for (auto& g : guards) g->release();
  written.push_back(stem + ".safetensors.index.json");
  return written;
}

}  // namespace wmtp
