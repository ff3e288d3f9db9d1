// Test helper (not a gtest): wmtp's own head-0 logits of a checkpoint, for the HF / PEFT round trip
// (test_hf_roundtrip.sh compares them with what transformers and peft compute from the exports).
//   ckpt_logits WEIGHTS.h5 TOKENS.safetensors OUT.safetensors [BASE.h5]
// The weights are read from the HDF5 checkpoint itself (never from an export) and run through
// MtpModel's forward in fp32; a LoRA checkpoint runs its adapters unmerged (the model's LoRA path),
// its frozen base read from the same file (a full checkpoint) or from BASE.h5 (adapters only).
// TOKENS holds "tokens" (int64 [B, S]); OUT gets "logits" (float32 [B, S, V]).
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "app/program.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/json.h"
#include "model/local_params.h"
#include "model/model_args.h"
#include "model/mtp.h"

using namespace wmtp;

namespace {

int run_logits(const std::string& weights, const std::string& tokens_path, const std::string& out,
               const std::string& base) {
  CheckpointReader w(weights, MPI_COMM_NULL);
  const ModelArgs args = model_args_from_json(json::parse(w.header().model_args_json), weights);
  LoraConfig lora;
  if (auto info = w.read_lora_record()) {
    lora.enabled = true;
    lora.rank = info->rank;
    lora.alpha = info->alpha;
    lora.dropout = 0.0;
    lora.targets = info->targets;
  }
  std::unique_ptr<CheckpointReader> b;
  if (!base.empty()) b = std::make_unique<CheckpointReader>(base, MPI_COMM_NULL);
  const MtpModel model(args, lora);
  std::unordered_map<std::string, at::Tensor> tensors;
  for (const auto& s : model.param_specs()) {
    const CheckpointReader* from = w.has_tensor(kModelGroup, s.fqn) ? &w : b.get();
    if (!from || !from->has_tensor(kModelGroup, s.fqn))
      throw_input(weights + ": no tensor " + s.fqn + " (and no base holds it)");
    tensors[s.fqn] = from->read_tensor(kModelGroup, s.fqn);
  }
  LocalParams params(model.param_specs(), std::move(tensors));
  const at::Tensor tokens = SafetensorsFile(tokens_path).read("tokens");
  c10::NoGradGuard no_grad;
  const at::Tensor logits = model.forward_logits(params, tokens, {}, /*all_heads=*/false).select(2, 0).contiguous();
  write_safetensors(out, {{"logits", logits}});
  std::printf("logits [%lld, %lld, %lld] of %s%s\n", static_cast<long long>(logits.size(0)),
              static_cast<long long>(logits.size(1)), static_cast<long long>(logits.size(2)), weights.c_str(),
              lora.enabled ? " (LoRA unmerged)" : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Program prog(argc, argv, {"ckpt_logits", "test helper: head-0 logits of a checkpoint for given tokens", ""});
  std::vector<std::string> args;
  prog.options().add_options()("args", boost::program_options::value<std::vector<std::string>>(&args), "");
  prog.positional("args", -1);
  return prog.run([&](ProgramContext&) -> int {
    if (args.size() == 3 || args.size() == 4)
      return run_logits(args[0], args[1], args[2], args.size() == 4 ? args[3] : "");
    throw_usage("usage: ckpt_logits WEIGHTS.h5 TOKENS.safetensors OUT.safetensors [BASE.h5]");
  });
}
