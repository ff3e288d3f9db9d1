// merge-lora: base weights + LoRA adapters -> merged weights, W += (alpha/r) B A in fp32.
// Base: a wmtp checkpoint (HDF5), Meta-named safetensors (+ params.json) or an HF directory.
// Adapters: a wmtp checkpoint holding ...lora_A/...lora_B with its /lora group (adapter-only or a
// full checkpoint of a LoRA run; omit it to merge adapters stored in the base file itself), or a
// PEFT directory. When the adapter file records its base's fingerprint, the base must match it.
// Trained tensors the adapter file carries beside the adapters (value head) are copied over. Adapters
// of a critic (train-critic with LoRA, whose value model reads the trunk + head 0 of an MTP base)
// merge into that critic: its model args, the base tensors it has, its value head and /value_head —
// a file train-verifiable loads as its critic.
// Output: a model-only HDF5 file (".h5") or a safetensors directory with Meta or HF names.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors_format.h"

namespace wmtp {

struct MergeOptions {
  std::string base;
  std::string base_format = "auto";  // auto | h5 | meta | hf
  std::string params_json;           // Meta safetensors base: default <dir>/params.json
  std::string lora;                  // HDF5 checkpoint or PEFT directory; "" = adapters in the base file
  std::string output;
  std::string output_format = "auto";  // auto (".h5" -> h5, else meta) | h5 | meta | hf
  std::string dtype = "fp32";          // fp32 | bf16
  bool ignore_fingerprint = false;
  uint64_t max_shard_bytes = 5'000'000'000;
};

// Collective over `comm` for HDF5 output (round-robin writers); safetensors output is written by
// rank 0. Returns the number of merged projections.
int64_t merge_lora_weights(const MergeOptions& opt, MPI_Comm comm);

}  // namespace wmtp
