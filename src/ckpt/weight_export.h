// convert-checkpoint export: a wmtp checkpoint -> safetensors for other tools (one process).
//   meta : <dir>/model.safetensors (sharded + index past max_shard_bytes) with Meta names, params.json
//   hf   : <dir>/model*.safetensors with HF names (q/k rows permuted), config.json; tensors HF has no
//          name for (MTP extra heads as mtp_heads.{j}.*, value head) in mtp_extra_heads.safetensors
//   peft : the LoRA adapters of a LoRA checkpoint as a PEFT directory
// A critic's value head (value_head.* tensors) is written in every format as value_head.safetensors
// + value_head_config.json beside the rest (value_head_export.h), not among the backbone's tensors.
// fp32 or bf16 (rounded to nearest even). A failure (a full disk) leaves nothing but what was there
// before: the files written so far are removed, and the directory too if the export created it.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors_format.h"
#include "model/model_args.h"

namespace wmtp {

struct ExportOptions {
  std::string input;            // wmtp checkpoint (.h5)
  std::string output;           // directory
  std::string format = "meta";  // meta | hf | peft
  StoreDtype dtype = StoreDtype::Float32;
  uint64_t max_shard_bytes = 5'000'000'000;
};

// Returns the files written (paths).
std::vector<std::string> export_weights(const ExportOptions& opt);

// The writer behind `meta`/`hf` export and merge-lora's safetensors output: `specs` in Meta names,
// `fetch` returns float32 tensors in Meta layout.
std::vector<std::string> write_model_safetensors(const std::string& dir, const std::string& format,
                                                 const ModelArgs& args, const std::vector<TensorSpec>& specs,
                                                 const std::function<at::Tensor(const std::string&)>& fetch,
                                                 StoreDtype dtype, uint64_t max_shard_bytes);

// What an export has written into `dir`, removed again unless done() is called: the files named by
// add(), and `dir` itself if it did not exist before (the constructor creates it) and is empty.
class OutputCleanup {
 public:
  explicit OutputCleanup(std::string dir);
  ~OutputCleanup();
  OutputCleanup(const OutputCleanup&) = delete;
  OutputCleanup& operator=(const OutputCleanup&) = delete;
  void add(const std::string& file) { files_.push_back(file); }
  std::vector<std::string> done();  // keeps everything; returns the files added

 private:
  std::string dir_;
  bool created_ = false, finished_ = false;
  std::vector<std::string> files_;
};

// Error(Usage) when `dir` already holds model files (safetensors, an index, params/config.json, a
// PEFT config): writing beside them would leave a mix that readers take for one model.
void require_no_model_files(const std::string& dir);
// Error(Input) naming the tensor and `context` ("writing out.h5") when `t` holds NaN or infinite values.
void require_finite(const at::Tensor& t, const std::string& name, const std::string& context);

}  // namespace wmtp
