// safetensors with tensors: every supported dtype round-trips bitwise; the writer follows the
// reference layout (8-byte aligned data, {"format":"pt"}); sharded model directories with an index
// read back; bad indexes are rejected; a failing writer leaves no file behind.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "test_util.h"

namespace wmtp::test {
namespace {

namespace fs = std::filesystem;

std::vector<std::pair<std::string, at::Tensor>> sample_tensors() {
  at::manual_seed(7);
  return {{"f32", at::randn({3, 5})},
          {"bf16", at::randn({4, 2}).to(at::kBFloat16)},
          {"f16", at::randn({7}).to(at::kHalf)},
          {"f64", at::randn({2, 2}, at::kDouble)},
          {"i64", at::arange(-3, 3, at::kLong)},
          {"i32", at::arange(5, at::kInt)},
          {"i16", at::arange(4, at::kShort)},
          {"i8", at::arange(-2, 2, at::kChar)},
          {"u8", at::arange(200, 206, at::kByte)},
          {"bool", at::tensor({1, 0, 1}, at::kByte).to(at::kBool)},
          {"scalar", at::tensor(2.5f).reshape({})},
          {"empty", at::zeros({0, 4})}};
}

TEST(Safetensors, EveryDtypeRoundTripsBitwise) {
  const std::string dir = scratch_dir("st_roundtrip");
  const std::string path = dir + "/all.safetensors";
  write_safetensors(path, sample_tensors());
  SafetensorsFile f(path);
  EXPECT_EQ(f.header().metadata, (StMetadata{{"format", "pt"}}));
  EXPECT_EQ(f.header().data_start % 8, 0u);
  for (const auto& [name, t] : sample_tensors()) {
    at::Tensor back = f.read(name);
    EXPECT_EQ(back.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(back.sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(back, t)) << name;
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Safetensors, ShardedModelDirectory) {
  const std::string dir = scratch_dir("st_sharded");
  std::vector<StTensorSpec> infos;
  std::map<std::string, at::Tensor> data;
  for (int i = 0; i < 5; ++i) {
    std::string n = "layers." + std::to_string(i) + ".w";
    data[n] = at::full({16, 16}, float(i));
    infos.push_back({n, StDtype::F32, {16, 16}});
  }
  auto files = write_safetensors_model(
      dir, infos, [&](const std::string& n) { return data.at(n); }, 2100);
  ASSERT_EQ(files.size(), 4u);  // 1024 bytes each, two per shard: 3 shards + index
  EXPECT_EQ(files[0], "model-00001-of-00003.safetensors");
  EXPECT_EQ(files[3], "model.safetensors.index.json");
  SafetensorsModel m(dir);
  EXPECT_EQ(m.names().size(), 5u);
  for (const auto& [n, t] : data) EXPECT_TRUE(at::equal(m.read(n), t)) << n;

  // Everything in one file when it fits.
  const std::string single = scratch_dir("st_single");
  EXPECT_EQ(write_safetensors_model(
                single, infos, [&](const std::string& n) { return data.at(n); }, 1 << 20),
            std::vector<std::string>{"model.safetensors"});
  EXPECT_TRUE(at::equal(SafetensorsModel(single).read("layers.4.w"), data["layers.4.w"]));
}

TEST(Safetensors, BadIndexesAreRejected) {
  const std::string dir = scratch_dir("st_bad_index");
  write_safetensors(dir + "/model-00001-of-00001.safetensors", {{"a", at::ones({2})}});
  auto with_index = [&](const std::string& text) { std::ofstream(dir + "/model.safetensors.index.json") << text; };
  auto expect_input = [&](const std::string& fragment) {
    try {
      SafetensorsModel m(dir);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  with_index(R"({"weight_map":{"a":"../../etc/passwd"}})");
  expect_input("not a file in this directory");
  with_index(R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})");
  expect_input("does not exist");
  with_index(R"({"weight_map":{"b":"model-00001-of-00001.safetensors"}})");
  expect_input("does not contain it");
  with_index(R"({"weight_map":[1]})");
  expect_input("weight_map");
  with_index(R"({"weight_map":{"a":"model-00001-of-00001.safetensors"}})");
  EXPECT_TRUE(at::equal(SafetensorsModel(dir).read("a"), at::ones({2})));

  try {
    SafetensorsModel m(dir + "/nothing_here");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
  }
}

TEST(Safetensors, FailingWriterLeavesNoFile) {
  const std::string dir = scratch_dir("st_fail");
  const std::string path = dir + "/out.safetensors";
  std::vector<StTensorSpec> infos = {{"a", StDtype::F32, {2}}, {"b", StDtype::F32, {2}}};
  EXPECT_THROW(write_safetensors(path, infos,
                                 [](const std::string& n) -> at::Tensor {
                                   if (n == "b") throw_input("source broke");
                                   return at::ones({2});
                                 }),
               Error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // A tensor that does not match what was announced is refused too.
  EXPECT_THROW(write_safetensors(path, infos, [](const std::string&) { return at::ones({3}); }), Error);
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace wmtp::test
