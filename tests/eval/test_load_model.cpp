// Loading a model to generate with: LoRA adapters — from the checkpoint itself (a LoRA run's full
// checkpoint) or from a separate adapter file beside a base — merged on load give the logits of the
// unmerged LoRA forward (the training path: lora_linear's adapter branch), and a file without a
// tensor the model needs, or with one of another shape, is refused naming it.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt/model_file.h"
#include "core/error.h"
#include "core/json.h"
#include "eval/load_model.h"
#include "model/local_params.h"
#include "model/mtp.h"
#include "rel_diff.h"
#include "tiny_model.h"
#include "test_util.h"

namespace wmtp {
namespace {

using test::rel_diff;
using TensorMap = std::unordered_map<std::string, at::Tensor>;

void write_file(const std::string& path, const ModelArgs& args, const TensorMap& t, CheckpointKind kind,
                const std::optional<LoraRecord>& lora) {
  std::vector<TensorSpec> specs;
  for (const auto& [n, v] : t) specs.push_back({n, v.sizes().vec()});
  ModelFileOptions mo;
  mo.kind = kind;
  mo.lora = lora;
  write_model_file(
      path, MPI_COMM_NULL, json::dump(model_args_to_json(args)), specs, [&](const std::string& n) { return t.at(n); },
      mo);
}

TEST(LoadModel, LoraMergedOnLoadMatchesTheAdaptedForward) {
  c10::NoGradGuard ng;
  const std::string dir = test::tmp_path("eval_load_model");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const ModelArgs args = test::tiny_args(2, 2);
  LoraConfig lc;
  lc.enabled = true;
  lc.rank = 4;
  lc.alpha = 8.0;
  lc.targets = {"wq", "wv", "w2"};
  MtpModel lora_model(args, lc);
  TensorMap all = lora_model.init_params(3);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(5);
  for (auto& [n, t] : all)  // lora_B starts at 0: give the adapters an effect to merge
    if (n.size() > 7 && n.compare(n.size() - 7, 7, ".lora_B") == 0) t.normal_(0.0, 0.05, g);
  TensorMap base, adapters;
  for (const auto& [n, t] : all) (n.find(".lora_") == std::string::npos ? base : adapters)[n] = t;
  const LoraRecord info{lc.rank, lc.alpha, 0.0, lc.targets, "", ""};
  write_file(dir + "/base.h5", args, base, CheckpointKind::Model, std::nullopt);
  write_file(dir + "/adapters.h5", args, adapters, CheckpointKind::Lora, info);
  write_file(dir + "/full_run.h5", args, all, CheckpointKind::Full, info);

  LocalParams ref_src(lora_model.param_specs(), all);
  at::Tensor tokens = at::randint(args.vocab_size, {2, 9}, g, at::kLong);
  at::Tensor ref = lora_model.forward_logits(ref_src, tokens, ForwardOptions{});
  for (const auto& [ckpt, lora] :
       {std::pair<std::string, std::string>{dir + "/base.h5", dir + "/adapters.h5"}, {dir + "/full_run.h5", ""}}) {
    GenerationModel gm = load_generation_model(ckpt, lora, "fp32", "cpu");
    EXPECT_EQ(gm.merged_lora, 3 * args.n_layer_blocks() + 3 * args.n_extra_heads()) << ckpt;
    at::Tensor got = gm.model->forward_logits(*gm.params, tokens, ForwardOptions{});
    EXPECT_LT(rel_diff(got, ref), 1e-5) << ckpt << " + " << lora;
  }
  // Without the adapters the base alone is another model.
  GenerationModel plain = load_generation_model(dir + "/base.h5", "", "fp32", "cpu");
  EXPECT_GT(rel_diff(plain.model->forward_logits(*plain.params, tokens, ForwardOptions{}), ref), 1e-3);

  TensorMap partial = base;
  partial.erase("norm.weight");
  write_file(dir + "/partial.h5", args, partial, CheckpointKind::Model, std::nullopt);
  try {
    load_generation_model(dir + "/partial.h5", "", "fp32", "cpu");
    FAIL() << "a file without norm.weight loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("norm.weight"), std::string::npos) << e.what();
  }
  // A tensor of another shape than the model args give is refused by name, before any weight is read.
  TensorMap misshapen = base;
  misshapen["norm.weight"] = at::ones({args.dim + 1});
  write_file(dir + "/misshapen.h5", args, misshapen, CheckpointKind::Model, std::nullopt);
  for (int load = 0; load < 2; ++load) {
    try {
      if (load) load_generation_model(dir + "/misshapen.h5", "", "fp32", "cpu");
      else
        inspect_generation_model(dir + "/misshapen.h5", "");
      FAIL() << "a file with a misshapen norm.weight was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
      EXPECT_NE(std::string(e.what()).find("'norm.weight' has shape"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace wmtp
