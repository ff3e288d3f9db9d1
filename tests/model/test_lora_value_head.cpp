// LoRA: identical output at init, merge equivalence, only adapters trained, names/shapes/targets.
// Value head: specs, initial value = bias_init, gradients reach only the head with a frozen backbone.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/config.h"
#include "core/error.h"
#include "model/mtp_loss.h"
#include "model/mtp_pass.h"
#include "model_test_util.h"
#include "rel_diff.h"

namespace wmtp {
namespace {

LoraConfig all_targets(int64_t rank = 4) {
  LoraConfig c;
  c.enabled = true;
  c.rank = rank;
  c.alpha = 8.0;
  c.targets = {"q_proj", "wk", "wv", "wo", "gate_proj", "down_proj", "up_proj"};  // HF aliases accepted
  return c;
}

TEST(Lora, SpecsNamesShapesAndTrainability) {
  ModelArgs a = test::tiny_args(1, 2);
  MtpModel m(a, all_targets());
  std::map<std::string, ParamSpec> by;
  for (const auto& s : m.param_specs()) by[s.fqn] = s;
  const ParamSpec& A = by.at("layers.0.attention.wq.lora_A");
  const ParamSpec& B = by.at("extra_heads.0.feed_forward.w2.lora_B");
  EXPECT_EQ(A.shape, (std::vector<int64_t>{4, a.dim}));
  EXPECT_EQ(B.shape, (std::vector<int64_t>{a.dim, 4}));
  EXPECT_EQ(B.unit, "extra_heads.0");
  for (const auto& kv : by) {
    const bool lora = kv.first.find(".lora_") != std::string::npos;
    EXPECT_EQ(kv.second.trainable, lora) << kv.first;
  }
  LoraConfig bad = all_targets();
  bad.targets = {"wq", "lm_head"};
  EXPECT_THROW(MtpModel(a, bad), Error);
  EXPECT_EQ(lora_target_names(all_targets()), (std::vector<std::string>{"wq", "wk", "wv", "wo", "w1", "w2", "w3"}));
}

// The one "is this an adapter tensor" test every reader of checkpoints and exports uses: the model's
// own adapter names are, its base weights and a value head are not, whatever their prefix.
TEST(Lora, AdapterTensorNames) {
  MtpModel m(test::tiny_args(1, 2), all_targets());
  int adapters = 0;
  for (const auto& s : m.param_specs()) {
    EXPECT_EQ(is_lora_tensor_name(s.fqn), s.trainable) << s.fqn;
    adapters += is_lora_tensor_name(s.fqn);
  }
  EXPECT_GT(adapters, 0);
  for (const char* name : {"lora_A", ".lora_A.weight", "layers.0.attention.wq.lora_Ax", "value_head.weight", ""})
    EXPECT_FALSE(is_lora_tensor_name(name)) << name;
  EXPECT_TRUE(is_lora_tensor_name("x.lora_B"));
}

TEST(Lora, InitOutputEqualsBaseAndMergeEqualsAdapted) {
  ModelArgs a = test::tiny_args(1, 2);
  MtpModel base(a), adapted(a, all_targets());
  LocalParams base_src = test::make_local(base, 9);
  auto init = adapted.init_params(9);
  at::Tensor tokens = test::random_tokens(2, 10, a.vocab_size, 2);
  at::Tensor base_logits = base.forward_logits(base_src, tokens, {});
  {
    LocalParams src(adapted.param_specs(), init);
    EXPECT_TRUE(at::equal(adapted.forward_logits(src, tokens, {}), base_logits));  // B = 0
  }
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(4);
  for (auto& kv : init)
    if (kv.first.find("lora_B") != std::string::npos) kv.second = at::randn(kv.second.sizes(), g) * 0.1;
  at::Tensor with_lora;
  {
    LocalParams src(adapted.param_specs(), init);
    with_lora = adapted.forward_logits(src, tokens, {});
  }
  EXPECT_GT(test::rel_diff(with_lora, base_logits), 1e-3);  // the adapters do something
  auto merged = init;
  EXPECT_EQ(merge_lora(merged, all_targets().scaling()), 3 * 7);
  LocalParams merged_src(base.param_specs(), merged);  // no lora_* left: loads as the base model
  EXPECT_LT(test::rel_diff(base.forward_logits(merged_src, tokens, {}), with_lora), 1e-5);

  auto broken = init;
  broken.erase("layers.0.attention.wq.lora_B");
  EXPECT_THROW(merge_lora(broken, 2.0), Error);
}

TEST(Lora, OnlyAdaptersGetGradients) {
  ModelArgs a = test::tiny_args(1, 2);
  MtpModel m(a, all_targets());
  LocalParams src = test::make_local(m, 1);
  MtpBatch b;
  b.tokens = test::random_tokens(2, 10, a.vocab_size, 3);
  b.labels = test::prompt_masked_labels(b.tokens, 3);
  auto c = count_valid_targets(b.labels, 2);
  mtp_forward_backward(m, src, b, {double(c[0]), double(c[1])}, {});
  int lora_b_nonzero = 0;
  for (const auto& s : m.param_specs()) {
    const at::Tensor& t = src.param(s.fqn);
    if (s.fqn.find(".lora_") == std::string::npos) {
      EXPECT_FALSE(t.grad().defined()) << s.fqn;
    } else {
      ASSERT_TRUE(t.grad().defined()) << s.fqn;
      if (s.fqn.back() == 'B') lora_b_nonzero += t.grad().abs().max().item<double>() > 0;
    }
  }
  EXPECT_EQ(lora_b_nonzero, 3 * 7);  // 3 blocks; with B = 0, A's gradient is 0 but B's is not
}

TEST(ValueHead, SpecsInitAndFrozenBackboneGradients) {
  ModelArgs a = test::tiny_args(1, 1);
  ValueHeadConfig vh;
  vh.enabled = true;
  vh.bias_init = 0.5;
  vh.dropout = 0.1;
  MtpModel m(a, {}, vh, /*freeze_base=*/true);
  auto specs = value_head_specs(a.dim, vh);
  ASSERT_EQ(specs.size(), 6u);
  EXPECT_EQ(specs[0].fqn, "value_head.mlp.0.weight");
  EXPECT_EQ(specs[0].shape, (std::vector<int64_t>{a.dim / 4, a.dim}));
  EXPECT_EQ(specs[2].shape, (std::vector<int64_t>{a.dim / 8, a.dim / 4}));
  EXPECT_EQ(specs[5].fqn, "value_head.mlp.6.bias");
  EXPECT_EQ(m.unit_names().back(), "value_head");
  // A value model has no output projection: no spec, no unit, never fetched, no logits.
  for (const auto& s : m.param_specs()) EXPECT_NE(s.fqn, "output.weight");
  for (const auto& u : m.unit_names()) EXPECT_NE(u, "output");
  EXPECT_THROW(MtpModel(test::tiny_args(1, 2), {}, vh), Error);  // value heads sit on n_future = 1 models

  LocalParams src = test::make_local(m, 2);
  at::Tensor tokens = test::random_tokens(2, 8, a.vocab_size, 1);
  ForwardOptions train;
  train.training = true;
  at::Tensor v = m.forward_values(src, tokens, train);
  ASSERT_EQ(v.sizes(), at::IntArrayRef({2, 8}));
  EXPECT_EQ(src.begin_count("norm"), 1);
  EXPECT_EQ(src.begin_count("output"), 0);
  EXPECT_THROW(m.forward_logits(src, tokens, train), Error);
  EXPECT_TRUE(at::allclose(v, at::full_like(v, 0.5)));  // last layer zero: value = bias_init
  (v - 1.0).pow(2).sum().backward();
  for (const auto& s : m.param_specs()) {
    const bool head = s.unit == "value_head";
    EXPECT_EQ(s.trainable, head) << s.fqn;
    EXPECT_EQ(src.param(s.fqn).grad().defined(), head) << s.fqn;
  }
  EXPECT_GT(src.param("value_head.mlp.6.weight").grad().abs().max().item<double>(), 0.0);

  // The TOML's spelling picks the architecture; an unknown one is refused when the config is read.
  ValueHeadConfig lin;
  ConfigSet set;
  set.add("value_head", lin);
  set.apply_overrides({"value_head.enabled=true", "value_head.type=linear"});
  auto ls = value_head_specs(a.dim, lin);
  ASSERT_EQ(ls.size(), 2u);
  EXPECT_EQ(ls[0].fqn, "value_head.linear.weight");
  EXPECT_NE(set.to_toml().find("type = 'linear'"), std::string::npos) << set.to_toml();
  EXPECT_THROW(set.apply_override("value_head.type=sigmoid"), Error);
}

}  // namespace
}  // namespace wmtp
