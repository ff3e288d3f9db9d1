// A model to generate with, read whole by each rank from a wmtp HDF5 file: a model file, a full
// checkpoint, or a checkpoint of a LoRA run (adapters in the file, or from `lora` beside a base):
// the adapters are merged on load (W += alpha/r B A in fp32, model/lora.h), so decoding runs the
// plain model. A value model (critic) has no logits and is refused.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "model/local_params.h"
#include "model/mtp.h"

namespace wmtp {

struct GenerationModel {
  std::unique_ptr<MtpModel> model;
  std::unique_ptr<LocalParams> params;  // the compute dtype, on the device
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  int64_t merged_lora = 0;  // projections the adapters were merged into
};

// `dtype` "fp32" | "bf16"; `device` "cpu" | "cuda" | "cuda:N". Throws Error(Input) naming the file
// for a missing tensor or an adapter without its base weight, Error(Usage) for a bad dtype/device.
GenerationModel load_generation_model(const std::string& path, const std::string& lora_path, const std::string& dtype,
                                      const std::string& device);

}  // namespace wmtp
