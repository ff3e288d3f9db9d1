// ModelArgs <-> Hugging Face LlamaForCausalLM config.json (docs/checkpoint-format.md, "Names").
// HF sees the standard model only: num_hidden_layers = n_layers - n_future_tokens + 1 (trunk + head
// 0); the MTP extra heads live in a sidecar file. The exact Meta arguments ride along under the key
// "wmtp_model_args" (transformers keeps unknown keys as attributes), so a round trip is exact; for
// foreign configs multiple_of is recovered from intermediate_size.
#pragma once
#include <string>

#include "core/json.h"
#include "model/model_args.h"

namespace wmtp {

inline constexpr const char* kMtpSidecarFile = "mtp_extra_heads.safetensors";

json::Value hf_config_from_model_args(const ModelArgs& args, const std::string& torch_dtype);
// `n_extra_heads`: extra heads found in the sidecar (0 without one). Throws Error(Input) naming
// `source` for missing/invalid fields or an intermediate_size no Meta sizing reproduces.
ModelArgs model_args_from_hf_config(const json::Value& cfg, const std::string& source, int64_t n_extra_heads);
json::Value read_json_file(const std::string& path);  // Error(Input) naming the file

}  // namespace wmtp
