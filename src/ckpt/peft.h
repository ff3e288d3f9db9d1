// PEFT LoRA adapter directories (docs/checkpoint-format.md, "PEFT adapters"): adapter_config.json + adapter_model.safetensors
// with keys "base_model.model.<HF module>.lora_A.weight" [r, in] / ".lora_B.weight" [out, r].
// wmtp adapters are trained in Meta layout, so lora_B rows of q/k are permuted to HF layout on
// export and back on import (lora_A is unchanged: P(BA) = (PB)A). Adapters on the MTP extra heads,
// which HF cannot name, go to adapter_mtp_heads.safetensors ("base_model.model.mtp_heads.{j}...").
// Import refuses what wmtp cannot represent, naming it: DoRA, bias != "none", lora_bias,
// modules_to_save, fan_in_fan_out, rank_pattern/alpha_pattern, embedding adapters, unknown keys.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors_format.h"
#include "model/model_args.h"

namespace wmtp {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";
inline constexpr const char* kPeftMtpHeadsFile = "adapter_mtp_heads.safetensors";
// __metadata__ key of adapter_model.safetensors holding the base fingerprint (wmtp's own; PEFT
// ignores it): written on export, checked by import --from peft --base and merge-lora.
inline constexpr const char* kPeftFingerprintKey = "wmtp_base_fingerprint";

struct LoraAdapter {
  LoraRecord record;  // rank, alpha, dropout, targets (Meta short names), base path (-> base_model_name_or_path),
                      // base fingerprint (-> the weights file's metadata)
  // Meta FQN -> tensor, Meta layout: "layers.0.attention.wq.lora_A" [r, in], "...lora_B" [out, r].
  std::map<std::string, at::Tensor> tensors;
  double scaling() const { return record.alpha / double(record.rank); }
};

// Writes the directory (created if needed). `dtype` F32 or BF16. Files appear only when complete.
void write_peft_adapter(const std::string& dir, const LoraAdapter& adapter, const ModelArgs& args,
                        StoreDtype dtype = StoreDtype::Float32);
// Reads and validates against `args` (shapes of every adapted projection). use_rslora adapters are
// converted: alpha becomes alpha*sqrt(r) so that alpha/r is PEFT's alpha/sqrt(r) scaling.
LoraAdapter read_peft_adapter(const std::string& dir, const ModelArgs& args);

// Shape of a base projection weight "<block>.<module>.weight" under `args` (nullopt if not a
// LoRA-capable projection of this model).
std::optional<std::vector<int64_t>> projection_weight_shape(const std::string& meta_weight, const ModelArgs& args);

}  // namespace wmtp
