// WeightSource: a read-only set of model tensors seen in Meta names and Meta layout, whatever file
// holds them — a wmtp HDF5 checkpoint, Meta-named safetensors, or an HF LlamaForCausalLM directory
// (names mapped, q/k rows un-permuted, MTP extra heads from the sidecar, tied embeddings expanded).
// convert-checkpoint and merge-lora read every input through it, one tensor at a time.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "model/model_args.h"

namespace wmtp {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::vector<std::string> names() const = 0;  // Meta FQNs, sorted
  virtual std::vector<int64_t> shape(const std::string& name) const = 0;
  virtual at::Tensor read(const std::string& name) const = 0;  // float32 (exact widening), shaped
  virtual std::string describe() const = 0;                    // for messages: the path
  bool contains(const std::string& name) const;
};

// /<group> of a wmtp checkpoint, read serially (one process).
std::unique_ptr<WeightSource> open_checkpoint_weights(const std::string& path, const std::string& group = "model");
// A safetensors file or model directory whose names are already Meta's.
std::unique_ptr<WeightSource> open_meta_safetensors(const std::string& path);
// An HF model directory (config.json + safetensors, sharded or not; mtp_extra_heads.safetensors when
// present). `args` is needed for the q/k permutation (read_hf_model_args gives it).
std::unique_ptr<WeightSource> open_hf_safetensors(const std::string& dir, const ModelArgs& args);
ModelArgs read_hf_model_args(const std::string& dir);

}  // namespace wmtp
