// Reading a model (+ LoRA adapters, merged) for generation, one process per copy, and the checks
// that need no weights.
#include "eval/load_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

#include "ckpt/checkpoint.h"
#include "ckpt/tokenizer_record.h"
#include "ckpt/weight_import.h"
#include "comm/device.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "model/lora.h"

namespace wmtp {

namespace {

// Every /model tensor of `path` (fp32, CPU) into `out` (later files overwrite earlier ones' entries).
void read_all(const std::string& path, std::unordered_map<std::string, at::Tensor>& out) {
  CheckpointReader r(path, MPI_COMM_NULL);
  for (const auto& n : r.tensor_names(kModelGroup)) out[n] = r.read_tensor(kModelGroup, n);
}

// Each /model tensor's shape and the file it comes from, `lora_path`'s winning (as read_all reads).
struct TensorTable {
  std::map<std::string, std::pair<std::vector<int64_t>, std::string>> entries;
  void add(const CheckpointReader& r, const std::string& path) {
    for (const auto& n : r.tensor_names(kModelGroup)) entries[n] = {r.tensor_shape(kModelGroup, n), path};
  }
  bool has(const std::string& n) const { return entries.count(n) > 0; }
};

struct Inspection {
  ModelArgs args;
  std::optional<LoraRecord> lora;
};

Inspection inspect(const std::string& path, const std::string& lora_path) {
  Inspection in;
  TensorTable table;
  {
    CheckpointReader head(path, MPI_COMM_NULL);
    if (head.read_value_head_record()) throw_input(path, ": a value model (critic) has no logits to generate with");
    in.args = model_args_from_text(head.header().model_args_json, path);
    in.lora = head.read_lora_record();
    table.add(head, path);
  }
  if (!lora_path.empty()) {
    CheckpointReader lr(lora_path, MPI_COMM_NULL);
    in.lora = lr.read_lora_record();
    if (!in.lora) throw_input(lora_path, ": no /lora group (not a checkpoint of a LoRA run)");
    table.add(lr, lora_path);
  }
  if (in.args.vocab_size <= 0 && table.has("tok_embeddings.weight"))
    resolve_vocab_size(in.args, table.entries.at("tok_embeddings.weight").first.at(0));
  for (const auto& [name, entry] : table.entries) {
    if (!is_lora_tensor_name(name)) continue;
    if (!in.lora || in.lora->rank <= 0)
      throw_input(entry.second, ": LoRA tensors without a /lora group giving rank and alpha");
    if (!table.has(name.substr(0, name.size() - 7) + ".weight"))
      throw_input(entry.second, ": no base weight for adapter '", name,
                  "' (an adapter-only file needs the base as the "
                  "checkpoint and this file as --lora)");
  }
  for (const auto& s : MtpModel(in.args).param_specs()) {
    auto it = table.entries.find(s.fqn);
    if (it == table.entries.end()) throw_input(path, ": no tensor '", s.fqn, "'");
    if (it->second.first != s.shape)
      throw_input(it->second.second, ": tensor '", s.fqn, "' has shape ", at::IntArrayRef(it->second.first),
                  " where the model args give ", at::IntArrayRef(s.shape));
  }
  return in;
}
}  // namespace

at::ScalarType generation_dtype(const std::string& dtype) {
  if (dtype == "fp32") return at::kFloat;
  if (dtype == "bf16") return at::kBFloat16;
  throw_usage("--dtype must be fp32 or bf16, got '", dtype, "'");
}

at::Device generation_device(const std::string& device) {
  try {
    const at::Device d(device);
    if (d.is_cpu() || d.is_cuda()) return d;
  } catch (const std::exception&) {
  }
  throw_usage("--device must be cpu, cuda or cuda:N, got '", device, "'");
}

ModelArgs inspect_generation_model(const std::string& path, const std::string& lora_path) {
  return inspect(path, lora_path).args;
}

std::vector<std::string> check_generation_model(const std::string& path, const std::string& lora_path,
                                                const Tokenizer& tok, int64_t max_new_tokens, int64_t speculative) {
  const ModelArgs args = inspect_generation_model(path, lora_path);
  std::vector<std::string> notes;
  const std::string against = "--tokenizer " + tok.path();
  for (const auto& [flag, file] : {std::pair<std::string, std::string>{"--checkpoint", path}, {"--lora", lora_path}}) {
    if (file.empty()) continue;
    std::string note = check_checkpoint_tokenizer(flag, file, tok.fingerprint(), against);
    if (!note.empty()) notes.push_back(std::move(note));
  }
  // A padded model vocabulary (more ids than the tokenizer's, as trainers allow) is decoded over the
  // tokenizer's ids only (DecodeOptions::vocab); a smaller one cannot embed every prompt id.
  if (tok.vocab_size() > args.vocab_size)
    throw_input(path, ": the model's vocabulary has ", args.vocab_size, " ids but --tokenizer ", tok.path(), " has ",
                tok.vocab_size(),
                ": the tokenizer gives ids the model cannot embed (a model vocabulary may be larger "
                "than the tokenizer's, never smaller)");
  if (tok.vocab_size() < args.vocab_size)
    notes.push_back(path + ": the model's vocabulary has " + std::to_string(args.vocab_size) + " ids, --tokenizer " +
                    tok.path() + " " + std::to_string(tok.vocab_size()) + ": ids from " +
                    std::to_string(tok.vocab_size()) + " on (padding) are never drafted nor sampled");
  if (speculative > args.n_future_tokens)
    throw_usage("--speculative ", speculative, ": ", path, " has n_future ", args.n_future_tokens,
                ", so K lies in [2, ", args.n_future_tokens, "] (1: plain decoding)");
  if (max_new_tokens > args.max_seq_len)
    throw_usage("--max-new-tokens ", max_new_tokens, " is more than ", path, "'s context holds (max_seq_len ",
                args.max_seq_len, "): at most ", args.max_seq_len);
  return notes;
}

GenerationModel load_generation_model(const std::string& path, const std::string& lora_path, const std::string& dtype,
                                      const std::string& device) {
  GenerationModel g;
  g.dtype = generation_dtype(dtype);
  g.device = generation_device(device);
  if (g.device.is_cuda()) {
    std::string why;
    const int n = cuda_device_count(&why);
    if (n <= std::max<int>(g.device.index(), 0))
      throw_input("--device ", device, ": ", n == 0 ? "no GPU (" + why + ")" : "only " + std::to_string(n) + " GPU(s)");
  }
  const Inspection in = inspect(path, lora_path);
  std::unordered_map<std::string, at::Tensor> tensors;
  read_all(path, tensors);
  if (!lora_path.empty()) read_all(lora_path, tensors);
  bool has_adapters = false;
  for (const auto& kv : tensors) has_adapters = has_adapters || is_lora_tensor_name(kv.first);
  if (has_adapters) g.merged_lora = merge_lora(tensors, in.lora->alpha / static_cast<double>(in.lora->rank));
  g.model = std::make_unique<MtpModel>(in.args);
  std::unordered_map<std::string, at::Tensor> params;
  for (const auto& s : g.model->param_specs()) params[s.fqn] = tensors.at(s.fqn).to(g.device, g.dtype);
  g.params = std::make_unique<LocalParams>(g.model->param_specs(), std::move(params));
  return g;
}

}  // namespace wmtp
