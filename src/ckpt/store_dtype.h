// StoreDtype: the dtype a user picks for the weights a program writes (--dtype fp32|bf16): HDF5
// checkpoints and model files store it, safetensors and PEFT exports write it (safetensors_format.h
// maps it to that format's tag). One enum for every writer, parsed once where the option is read.
#pragma once
#include <string>

namespace wmtp {

enum class StoreDtype { Float32, BFloat16 };

// "fp32" | "bf16"; anything else is an Error(Usage) naming `option`.
StoreDtype parse_store_dtype(const std::string& s, const std::string& option = "--dtype");
// "float32" | "bfloat16": the torch_dtype of checkpoint datasets and of HF config.json.
const char* torch_dtype_name(StoreDtype d);

}  // namespace wmtp
