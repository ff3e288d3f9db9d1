// Writing whole model-only checkpoints (kind "model", or "lora" for adapter files) from tensors that
// come one at a time — imports, merges, PEFT imports. Collective over `comm`: tensors are dealt
// round-robin, each rank fetches and writes only its own (whole) tensors, so every input tensor is
// read once whatever the rank count and one process holds one tensor at a time.
// The file is written as "<path>.tmp" and renamed by rank 0 when complete: an error leaves no
// output file behind.
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"

namespace wmtp {

struct ModelFileOptions {
  CheckpointKind kind = CheckpointKind::Model;  // Lora for adapter files
  StoreDtype dtype = StoreDtype::Float32;
  std::optional<LoraRecord> lora;
  std::optional<ValueHeadRecord> value_head;  // a value model's /value_head
  TrainState train_state;   // /train when not empty (a merge keeps the tokenizer fingerprint of its source)
  std::string config_toml;  // optional /meta/config_toml
};

// `fetch(name)` returns the tensor of `specs` with that name (any float dtype, the spec's shape;
// a mismatch is Error(Input)). `specs` must be the same on every rank.
void write_model_file(const std::string& path, MPI_Comm comm, const std::string& model_args_json,
                      const std::vector<TensorSpec>& specs, const std::function<at::Tensor(const std::string&)>& fetch,
                      const ModelFileOptions& options = {});

}  // namespace wmtp
