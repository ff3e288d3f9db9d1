// A model to generate with, read whole by each rank from a wmtp HDF5 file: a model file, a full
// checkpoint, or a checkpoint of a LoRA run (adapters in the file, or from `lora` beside a base):
// the adapters are merged on load (W += alpha/r B A in fp32, model/lora.h), so decoding runs the
// plain model. A value model (critic) has no logits and is refused.
//
// check_generation_model reads attributes and the tensor table only, so a program that generates
// with several checkpoints (evaluate) checks every one of them before its first forward.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "model/local_params.h"
#include "model/model_args.h"
#include "model/mtp.h"

namespace wmtp {

class Tokenizer;

struct GenerationModel {
  std::unique_ptr<MtpModel> model;
  std::unique_ptr<LocalParams> params;  // the compute dtype, on the device
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  int64_t merged_lora = 0;  // projections the adapters were merged into
};

// --dtype "fp32" | "bf16" and --device "cpu" | "cuda" | "cuda:N" (the spelling only: whether that
// GPU exists is load_generation_model's check). Error(Usage) naming the flag.
at::ScalarType generation_dtype(const std::string& dtype);
at::Device generation_device(const std::string& device);

// What the files say without reading a weight: the model args (vocabulary resolved), and whether
// every tensor the model needs is there with its shape, LoRA adapters with their rank and alpha and
// each with its base weight. Error(Input) naming the file otherwise; a value model is refused.
ModelArgs inspect_generation_model(const std::string& path, const std::string& lora_path);

// inspect_generation_model, then what generating with `tok` needs: the tokenizer the checkpoint (and
// `lora_path`) records (ckpt/tokenizer_record.h), a vocabulary at least the tokenizer's size (a
// smaller one cannot embed every id; a larger, padded one is decoded over the tokenizer's ids only:
// DecodeOptions::vocab), --speculative in [1, n_future], --max-new-tokens at most max_seq_len.
// Error(Input) naming the file, Error(Usage) naming the flag. Returns notes to log: what could not be
// checked (a checkpoint that records no tokenizer), a padded vocabulary.
std::vector<std::string> check_generation_model(const std::string& path, const std::string& lora_path,
                                                const Tokenizer& tok, int64_t max_new_tokens, int64_t speculative);

// Throws as inspect_generation_model does, Error(Input) for a --device GPU that is not there.
GenerationModel load_generation_model(const std::string& path, const std::string& lora_path, const std::string& dtype,
                                      const std::string& device);

}  // namespace wmtp
