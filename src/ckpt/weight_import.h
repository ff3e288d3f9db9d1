// convert-checkpoint import: foreign weights -> a wmtp model-only checkpoint (HDF5).
//   meta : Meta-named safetensors (file or directory) + params.json
//   hf   : HF LlamaForCausalLM directory (config.json + safetensors, sharded or not, with
//          mtp_extra_heads.safetensors for MTP heads): names mapped, q/k rows un-permuted
//   peft : a PEFT adapter directory -> a LoRA-only checkpoint (kind "lora") for a given base
// Every tensor the model args describe must be present with its shape and nothing else may be
// (errors name the tensor and both shapes). Collective over `comm` (MPI_COMM_WORLD under mpirun,
// or a one-rank communicator); the output appears only when complete.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "model/model_args.h"

namespace wmtp {

struct ImportOptions {
  std::string from;  // "meta" | "hf" | "peft"
  std::string input;
  std::string params_json;  // meta: default <input dir>/params.json; peft: model args when no base
  std::string base;         // peft: base checkpoint (HDF5): model args and fingerprint
  std::string output;       // the .h5 to write
  StoreDtype dtype = StoreDtype::Float32;
};

void import_weights(const ImportOptions& opt, MPI_Comm comm);

// The base (non-LoRA, no value head) parameters of a model with these args, in model order.
std::vector<TensorSpec> base_model_specs(const ModelArgs& args);
std::string model_args_json_text(const ModelArgs& args);  // compact JSON, canonical order
ModelArgs model_args_from_text(const std::string& json_text, const std::string& source);

}  // namespace wmtp
