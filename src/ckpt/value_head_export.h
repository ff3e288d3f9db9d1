// The value head of a critic checkpoint as files beside an exported backbone (convert-checkpoint
// export, every format): value_head.safetensors with weighted_mtp's value_head_state_dict keys
// ("mlp.0.weight" ... "mlp.6.bias", or "linear.weight" / "linear.bias": the /model/value_head.*
// tensors without their prefix) and value_head_config.json {type, hidden_size, dropout, bias_init}
// (from /value_head; when the file lacks it — merge-lora output — type and hidden_size are inferred
// from the tensors and dropout / bias_init are null).
#pragma once
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors_format.h"

namespace wmtp {

inline constexpr const char* kValueHeadWeightsFile = "value_head.safetensors";
inline constexpr const char* kValueHeadConfigFile = "value_head_config.json";

bool is_value_head_tensor_name(const std::string& name);  // "value_head.*"

// Writes both files into `dir` when the checkpoint has value-head tensors; returns the paths written
// ({} for a checkpoint without a value head). One process (reads whole tensors).
std::vector<std::string> export_value_head(const CheckpointReader& r, const std::string& dir, StoreDtype dtype);

}  // namespace wmtp
