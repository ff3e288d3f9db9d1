// ModelArgs: Meta's FFN sizing, params.json parsing (unknown keys, nulls, missing keys), the JSON
// round trip, vocab resolution and the [model] table.
#include <gtest/gtest.h>

#include <fstream>

#include "core/config.h"
#include "core/error.h"
#include "core/json.h"
#include "model/model_args.h"
#include "test_util.h"

namespace wmtp {
namespace {

TEST(ModelArgs, FfnHiddenMeta7B) {
  ModelArgs a;  // Meta defaults are the 7B args: dim 4096, multiple_of 256
  EXPECT_EQ(ffn_hidden_dim(a), 11008);
}

TEST(ModelArgs, FfnHiddenWithMultiplier) {
  ModelArgs a;
  a.dim = 8192;  // LLaMA-2 70B: int(1.3 * 21845) = 28398 -> rounded up to 4096 -> 28672
  a.ffn_dim_multiplier = 1.3;
  a.multiple_of = 4096;
  EXPECT_EQ(ffn_hidden_dim(a), 28672);
  a.dim = 4096;  // LLaMA-3 8B: int(1.3 * 10922) = 14198 -> multiple of 1024 -> 14336
  a.multiple_of = 1024;
  EXPECT_EQ(ffn_hidden_dim(a), 14336);
}

TEST(ModelArgs, FromJsonDefaultsUnknownKeysAndNulls) {
  auto v = json::parse(R"({"dim": 64, "n_layers": 5, "n_heads": 4, "n_kv_heads": null, "vocab_size": -1,
                           "ffn_dim_multiplier": null, "n_future_tokens": 4, "max_batch_size": 32,
                           "something_new": {"x": 1}})");
  ModelArgs a = model_args_from_json(v, "p.json");
  EXPECT_EQ(a.dim, 64);
  EXPECT_EQ(a.n_kv_heads, 4);  // null = n_heads
  EXPECT_EQ(a.vocab_size, -1);
  EXPECT_FALSE(a.ffn_dim_multiplier.has_value());
  EXPECT_EQ(a.multiple_of, 256);
  EXPECT_DOUBLE_EQ(a.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(a.rope_theta, 10000.0);
  EXPECT_EQ(a.n_future_tokens, 4);
  EXPECT_EQ(a.n_layer_blocks(), 2);
  EXPECT_EQ(a.n_trunk_blocks(), 1);
  EXPECT_EQ(a.n_extra_heads(), 3);
}

TEST(ModelArgs, MissingKeyNamesFileAndKey) {
  auto v = json::parse(R"({"dim": 64, "n_heads": 4})");
  try {
    model_args_from_json(v, "ckpt/params.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("ckpt/params.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("n_layers"), std::string::npos) << e.what();
  }
  auto bad = json::parse(R"({"dim": "big", "n_layers": 2, "n_heads": 4})");
  EXPECT_THROW(model_args_from_json(bad, "x.json"), Error);
  auto inconsistent = json::parse(R"({"dim": 60, "n_layers": 2, "n_heads": 8})");
  EXPECT_THROW(model_args_from_json(inconsistent, "x.json"), Error);
}

TEST(ModelArgs, JsonRoundTripAndFile) {
  ModelArgs a;
  a.dim = 96;
  a.n_layers = 6;
  a.n_heads = 6;
  a.n_kv_heads = 2;
  a.vocab_size = 1000;
  a.ffn_dim_multiplier = 1.5;
  a.rope_theta = 500000.0;
  a.n_future_tokens = 2;
  a.max_seq_len = 128;
  const std::string path = test::scratch_dir("model_args_roundtrip") + "/params.json";
  { std::ofstream(path) << json::dump(model_args_to_json(a)); }
  ModelArgs b = model_args_from_params_json(path);
  EXPECT_EQ(json::dump(model_args_to_json(b)), json::dump(model_args_to_json(a)));
  EXPECT_EQ(b.ffn_dim_multiplier.value(), 1.5);
  EXPECT_THROW(model_args_from_params_json(path + ".missing"), Error);
}

TEST(ModelArgs, ResolveVocab) {
  ModelArgs a;
  EXPECT_THROW(resolve_vocab_size(a, -1), Error);
  resolve_vocab_size(a, 32000);
  EXPECT_EQ(a.vocab_size, 32000);
  resolve_vocab_size(a, 32000);
  EXPECT_THROW(resolve_vocab_size(a, 32001), Error);
}

TEST(ModelArgs, ModelTableInlineAndParamsJson) {
  ModelConfig cfg;
  EXPECT_THROW(resolve_model_args(cfg), Error);  // neither params_json nor inline sizes

  ConfigSet set;
  set.add("model", cfg);
  set.load_string(
      "[model]\ndim = 64\nn_layers = 4\nn_heads = 8\nn_kv_heads = 2\nn_future_tokens = 2\n"
      "vocab_size = 100\n",
      "inline.toml");
  ModelArgs a = resolve_model_args(cfg);
  EXPECT_EQ(a.dim, 64);
  EXPECT_EQ(a.kv_heads(), 2);
  EXPECT_EQ(a.multiple_of, 256);  // Meta default
  EXPECT_TRUE(cfg.sequential_unembedding);

  const std::string path = test::scratch_dir("model_args_table") + "/params.json";
  { std::ofstream(path) << R"({"dim": 128, "n_layers": 6, "n_heads": 4, "vocab_size": -1, "n_future_tokens": 4})"; }
  ModelConfig c2;
  c2.params_json = path;
  c2.max_seq_len = 256;  // an inline override on top of the file
  ModelArgs b = resolve_model_args(c2);
  EXPECT_EQ(b.dim, 128);
  EXPECT_EQ(b.n_kv_heads, 4);
  EXPECT_EQ(b.max_seq_len, 256);
  EXPECT_EQ(b.vocab_size, -1);
  c2.n_future_tokens = 7;  // more heads than blocks
  EXPECT_THROW(resolve_model_args(c2), Error);
}

}  // namespace
}  // namespace wmtp
