// WeightSource implementations over HDF5 checkpoints and safetensors (see weight_source.h).
#include "ckpt/weight_source.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_config.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "model/names.h"

namespace fs = std::filesystem;

namespace wmtp {

bool WeightSource::contains(const std::string& name) const {
  auto n = names();
  return std::binary_search(n.begin(), n.end(), name);
}

namespace {

class CheckpointWeights : public WeightSource {
 public:
  CheckpointWeights(const std::string& path, std::string group)
      : reader_(path, MPI_COMM_NULL), group_(std::move(group)) {
    names_ = reader_.tensor_names(group_);
    std::sort(names_.begin(), names_.end());
  }
  std::vector<std::string> names() const override { return names_; }
  std::vector<int64_t> shape(const std::string& n) const override { return reader_.tensor_shape(group_, n); }
  at::Tensor read(const std::string& n) const override { return reader_.read_tensor(group_, n); }
  std::string describe() const override { return reader_.header().path; }

 private:
  CheckpointReader reader_;
  std::string group_;
  std::vector<std::string> names_;
};

class MetaSafetensors : public WeightSource {
 public:
  explicit MetaSafetensors(const std::string& path) : model_(path) {}
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (auto& n : model_.names())
      if (!is_ignored_meta_name(n)) out.push_back(n);
    return out;
  }
  std::vector<int64_t> shape(const std::string& n) const override { return model_.entry(n).shape; }
  at::Tensor read(const std::string& n) const override { return to_float(model_.read(n), n); }
  std::string describe() const override { return model_.source(); }

  static at::Tensor to_float(const at::Tensor& t, const std::string& name) {
    if (!at::isFloatingType(t.scalar_type()))
      throw_input("tensor '", name, "' is not floating point (", t.scalar_type(), ")");
    return t.to(at::kFloat);
  }

 private:
  SafetensorsModel model_;
};

class HfSafetensors : public WeightSource {
 public:
  HfSafetensors(const std::string& dir, const ModelArgs& args) : args_(args), dir_(dir), main_(dir) {
    for (const auto& hf : main_.names()) {
      if (is_ignored_hf_name(hf)) continue;
      auto meta = hf_to_meta_name(hf);
      if (!meta) throw_input(dir, ": tensor '", hf, "' is not a LLaMA parameter wmtp knows");
      map_[*meta] = {hf, false};
    }
    const fs::path side = fs::path(dir) / kMtpSidecarFile;
    if (fs::exists(side)) {
      sidecar_ = std::make_unique<SafetensorsFile>(side.string());
      for (const auto& s : sidecar_->names()) {
        auto meta = sidecar_to_meta_name(s);
        if (!meta) throw_input(side.string(), ": tensor '", s, "' is not an MTP head parameter");
        map_[*meta] = {s, true};
      }
    }
    // Tied embeddings: HF omits lm_head; Meta always has output.weight.
    if (!map_.count("output.weight") && map_.count("tok_embeddings.weight")) {
      const json::Value cfg = read_json_file((fs::path(dir) / "config.json").string());
      const json::Value* tie = cfg.find("tie_word_embeddings");
      if (tie && tie->is_bool() && tie->as_bool()) map_["output.weight"] = map_["tok_embeddings.weight"];
    }
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [m, e] : map_) out.push_back(m);
    return out;
  }
  std::vector<int64_t> shape(const std::string& n) const override {
    const auto& e = at_name(n);
    return e.sidecar ? sidecar_->entry(e.name).shape : main_.entry(e.name).shape;
  }
  at::Tensor read(const std::string& n) const override {
    const auto& e = at_name(n);
    at::Tensor t = MetaSafetensors::to_float(e.sidecar ? sidecar_->read(e.name) : main_.read(e.name), e.name);
    if (int64_t heads = rotary_permutation_heads(n, args_)) t = permute_rotary_hf_to_meta(t, heads);
    return t;
  }
  std::string describe() const override { return dir_; }

 private:
  struct Entry {
    std::string name;
    bool sidecar;
  };
  const Entry& at_name(const std::string& n) const {
    auto it = map_.find(n);
    if (it == map_.end()) throw_input(dir_, ": no tensor for '", n, "'");
    return it->second;
  }
  ModelArgs args_;
  std::string dir_;
  SafetensorsModel main_;
  std::unique_ptr<SafetensorsFile> sidecar_;
  std::map<std::string, Entry> map_;
};

}  // namespace

std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& path, const std::string& group) {
  return std::make_unique<CheckpointWeights>(path, group);
}

std::unique_ptr<WeightSource> open_meta_safetensors(const std::string& path) {
  return std::make_unique<MetaSafetensors>(path);
}

std::unique_ptr<WeightSource> open_hf_safetensors(const std::string& dir, const ModelArgs& args) {
  return std::make_unique<HfSafetensors>(dir, args);
}

ModelArgs read_hf_model_args(const std::string& dir) {
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(cfg_path)) throw_input(dir, ": no config.json (not an HF model directory)");
  int64_t extra = 0;
  const fs::path side = fs::path(dir) / kMtpSidecarFile;
  if (fs::exists(side)) {
    std::set<std::string> heads;
    for (const auto& s : SafetensorsFile(side.string()).names())
      if (auto meta = sidecar_to_meta_name(s)) heads.insert(meta->substr(0, meta->find('.', 12)));
    extra = int64_t(heads.size());
  }
  return model_args_from_hf_config(read_json_file(cfg_path), cfg_path, extra);
}

}  // namespace wmtp
