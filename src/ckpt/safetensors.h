// safetensors files as LibTorch tensors: one validated file (SafetensorsFile), a model directory that
// may be sharded with model.safetensors.index.json (SafetensorsModel), and writers that stream
// tensors one at a time (so exporting a 7B model never holds it all in memory).
// Writers write "<path>.tmp" and rename at the end: a failure leaves no output file behind.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ckpt/safetensors_format.h"

namespace wmtp {

StDtype st_dtype_of(const at::Tensor& t);  // throws Error(Usage) for dtypes safetensors lacks here
c10::ScalarType scalar_type_of(StDtype d);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);  // reads and validates the header
  const std::string& path() const { return path_; }
  const StHeader& header() const { return header_; }
  std::vector<std::string> names() const;  // header order
  bool contains(const std::string& name) const { return header_.find(name) != nullptr; }
  const StEntry& entry(const std::string& name) const;  // Error(Input) if absent
  at::Tensor read(const std::string& name) const;       // stored dtype, shaped

 private:
  std::string path_;
  StHeader header_;
};

// A set of tensors spread over one or more safetensors files: a single file, or a directory with
// model.safetensors.index.json (weight_map name -> shard file) or with model.safetensors.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& path);
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const StEntry& entry(const std::string& name) const;
  at::Tensor read(const std::string& name) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// What a writer needs to know about each tensor up front; `fetch` returns its data afterwards (in
// order, one at a time), already in `dtype` with `shape`.
struct StTensorSpec {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;
};
using StFetch = std::function<at::Tensor(const std::string& name)>;

// One file. `metadata` defaults to {"format": "pt"} (HF transformers expects it).
void write_safetensors(const std::string& path, std::vector<StTensorSpec> tensors, const StFetch& fetch,
                       const StMetadata& metadata = {{"format", "pt"}});
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const StMetadata& metadata = {{"format", "pt"}});

// A model directory in HF layout: `<stem>.safetensors` when everything fits in max_shard_bytes,
// otherwise `<stem>-0000k-of-0000n.safetensors` plus `<stem>.safetensors.index.json`. Tensors are
// assigned to shards in the given order. Returns the files written (relative names).
std::vector<std::string> write_safetensors_model(const std::string& dir, const std::vector<StTensorSpec>& tensors,
                                                 const StFetch& fetch, uint64_t max_shard_bytes,
                                                 const std::string& stem = "model");

}  // namespace wmtp
