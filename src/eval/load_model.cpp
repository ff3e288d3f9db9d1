// Reading a model (+ LoRA adapters, merged) for generation, one process per copy.
#include "eval/load_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <unordered_map>

#include "ckpt/checkpoint.h"
#include "ckpt/weight_import.h"
#include "comm/device.h"
#include "core/error.h"

namespace wmtp {

namespace {
bool is_lora_name(const std::string& n) {
  return n.size() > 7 && (n.compare(n.size() - 7, 7, ".lora_A") == 0 || n.compare(n.size() - 7, 7, ".lora_B") == 0);
}

// Every /model tensor of `path` (fp32, CPU) into `out` (later files overwrite earlier ones' entries).
void read_all(const std::string& path, std::unordered_map<std::string, at::Tensor>& out) {
  CheckpointReader r(path, MPI_COMM_NULL);
  for (const auto& n : r.tensor_names(kModelGroup)) out[n] = r.read_tensor(kModelGroup, n);
}
}  // namespace

GenerationModel load_generation_model(const std::string& path, const std::string& lora_path, const std::string& dtype,
                                      const std::string& device) {
  GenerationModel g;
  if (dtype == "bf16") g.dtype = at::kBFloat16;
  else if (dtype != "fp32") throw_usage("--dtype must be fp32 or bf16, got '", dtype, "'");
  try {
    g.device = at::Device(device);
  } catch (const std::exception&) {
    throw_usage("--device must be cpu, cuda or cuda:N, got '", device, "'");
  }
  if (g.device.is_cuda()) {
    std::string why;
    const int n = cuda_device_count(&why);
    if (n <= std::max<int>(g.device.index(), 0))
      throw_input("--device ", device, ": ", n == 0 ? "no GPU (" + why + ")" : "only " + std::to_string(n) + " GPU(s)");
  }
  CheckpointReader head(path, MPI_COMM_NULL);
  if (head.read_value_head_info()) throw_input(path, ": a value model (critic) has no logits to generate with");
  ModelArgs args = model_args_from_text(head.info().model_args_json, path);
  std::optional<LoraInfo> lora = head.read_lora_info();
  std::unordered_map<std::string, at::Tensor> tensors;
  read_all(path, tensors);
  if (!lora_path.empty()) {
    CheckpointReader lr(lora_path, MPI_COMM_NULL);
    lora = lr.read_lora_info();
    if (!lora) throw_input(lora_path, ": no /lora group (not a checkpoint of a LoRA run)");
    read_all(lora_path, tensors);
  }
  if (args.vocab_size <= 0 && tensors.count("tok_embeddings.weight"))
    resolve_vocab_size(args, tensors.at("tok_embeddings.weight").size(0));
  bool has_adapters = false;
  for (const auto& kv : tensors) has_adapters = has_adapters || is_lora_name(kv.first);
  if (has_adapters) {
    if (!lora || lora->rank <= 0) throw_input(path, ": LoRA tensors without a /lora group giving rank and alpha");
    for (const auto& kv : tensors)
      if (is_lora_name(kv.first) && !tensors.count(kv.first.substr(0, kv.first.size() - 7) + ".weight"))
        throw_input(path, ": no base weight for adapter '", kv.first, "' (an adapter-only file needs the base as the "
                    "checkpoint and this file as --lora)");
    g.merged_lora = merge_lora(tensors, lora->alpha / static_cast<double>(lora->rank));
  }
  g.model = std::make_unique<MtpModel>(args);
  std::unordered_map<std::string, at::Tensor> params;
  for (const auto& s : g.model->param_specs()) {
    auto it = tensors.find(s.fqn);
    if (it == tensors.end()) throw_input(path, ": no tensor '", s.fqn, "'");
    params[s.fqn] = it->second.to(g.device, g.dtype);
  }
  g.params = std::make_unique<LocalParams>(g.model->param_specs(), std::move(params));
  return g;
}

}  // namespace wmtp
