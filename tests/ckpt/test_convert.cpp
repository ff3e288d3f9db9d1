// convert-checkpoint and merge-lora end to end on a tiny GQA MTP model (dim 64, 4 heads, 2 kv heads,
// 3 layer blocks + 1 extra head). Expected HF files are built here independently of the library's
// name map and permutation (explicit name table, the row formula of docs/checkpoint-format.md,
// "Names"), then:
//  - Meta safetensors -> import -> export meta reproduces the input bytes (fp32 and bf16);
//  - HF -> import -> export hf reproduces the HF files; the Meta and HF imports are identical;
//  - import under mpirun -np 2 equals the one-process import;
//  - merge-lora gives W + alpha/r B A (checked in float64), the PEFT round trip merges identically,
//    a base with another fingerprint is refused;
//  - a PEFT directory beyond plain LoRA, or with a bad tensor, is refused naming the setting or tensor;
//  - corrupted or mismatched inputs exit 2 naming the problem and leave no output behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "ckpt/checkpoint.h"
#include "ckpt/model_file.h"
#include "ckpt/peft.h"
#include "ckpt/safetensors.h"
#include "ckpt/weight_import.h"
#include "ckpt_test_util.h"
#include "core/error.h"
#include "core/json.h"
#include "model/model_args.h"
#include "model/mtp.h"
#include "test_util.h"
#include "tiny_model.h"

namespace wmtp::test {
namespace {

namespace fs = std::filesystem;
using TensorMap = std::map<std::string, at::Tensor>;

// The shared tiny model at the sizes the hand-written params.json and config.json below spell out.
ModelArgs convert_args() {
  ModelArgs a = tiny_args(2, 2);
  a.dim = 64;
  a.vocab_size = 50;
  a.max_seq_len = 128;
  return a;
}

TensorMap random_weights(uint64_t seed) {
  at::manual_seed(seed);
  TensorMap m;
  for (const auto& s : MtpModel(convert_args()).param_specs()) m[s.fqn] = at::randn(s.shape);
  return m;
}

// ---- the HF layout, written out independently of model/names.cpp ----
const std::map<std::string, std::string> kBlockNames = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},      {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"}};

// (file, name) of a Meta tensor in an HF export: "main" or "sidecar".
std::pair<std::string, std::string> hf_place(const std::string& meta) {
  if (meta == "tok_embeddings.weight") return {"main", "model.embed_tokens.weight"};
  if (meta == "norm.weight") return {"main", "model.norm.weight"};
  if (meta == "output.weight") return {"main", "lm_head.weight"};
  for (auto [prefix, file, out] :
       {std::tuple<std::string, std::string, std::string>{"layers.", "main", "model.layers."},
        {"extra_heads.", "sidecar", "mtp_heads."}}) {
    if (meta.rfind(prefix, 0) != 0) continue;
    size_t dot = meta.find('.', prefix.size());
    return {file, out + meta.substr(prefix.size(), dot - prefix.size()) + "." + kBlockNames.at(meta.substr(dot + 1))};
  }
  ADD_FAILURE() << "no HF place for " << meta;
  return {};
}

// HF row i of head h = Meta row 2*(i % (head_dim/2)) + i / (head_dim/2), by explicit loops.
at::Tensor to_hf_rows(const at::Tensor& w, int64_t heads) {
  const int64_t hd = w.size(0) / heads, half = hd / 2;
  at::Tensor out = at::empty_like(w);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hd; ++i) out[h * hd + i] = w[h * hd + 2 * (i % half) + i / half];
  return out;
}
int64_t heads_of(const std::string& meta) {
  const std::string q = "attention.wq.", k = "attention.wk.";
  if (meta.find(q) != std::string::npos) return convert_args().n_heads;
  if (meta.find(k) != std::string::npos) return convert_args().n_kv_heads;
  return 0;
}

void write_json(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TensorMap read_model_group(const std::string& h5) {
  CheckpointReader r(h5, MPI_COMM_NULL);
  TensorMap m;
  for (const auto& n : r.tensor_names(kModelGroup)) m[n] = r.read_tensor(kModelGroup, n);
  return m;
}

TensorMap read_all_safetensors(const std::string& path) {
  SafetensorsModel m(path);
  TensorMap out;
  for (const auto& n : m.names()) out[n] = m.read(n);
  return out;
}

void expect_same_maps(const TensorMap& a, const TensorMap& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [n, t] : a) {
    ASSERT_TRUE(b.count(n)) << what << ": missing " << n;
    EXPECT_TRUE(bitwise_equal(t.contiguous(), b.at(n).contiguous()) ||
                (t.scalar_type() != at::kFloat && at::equal(t, b.at(n))))
        << what << ": " << n << " differs";
  }
}

// mpirun started from this (singleton MPI) test process: without the inherited OMPI_/PMIX_
// variables, or the child mpirun thinks it is part of this job and fails.
std::string mpirun(int np) {
  std::string s = "env";
  for (char** e = environ; *e; ++e) {
    std::string var(*e);
    if (var.rfind("OMPI_", 0) == 0 || var.rfind("PMIX_", 0) == 0 || var.rfind("OPAL_", 0) == 0)
      s += " -u " + var.substr(0, var.find('='));
  }
  s += " " + test::mpiexec() + " --oversubscribe";
  if (getuid() == 0) s += " --allow-run-as-root";
  return s + " -np " + std::to_string(np) + " ";
}

struct Fixture {
  std::string dir;
  TensorMap weights;  // Meta names and layout, fp32
};

// Writes meta/ (fp32 safetensors + params.json with vocab_size -1), meta_bf16/, hf/ (sharded, sidecar).
Fixture make_inputs() {
  Fixture f;
  f.dir = scratch_dir("ckpt_convert");
  f.weights = random_weights(11);
  fs::create_directories(f.dir + "/meta");
  fs::create_directories(f.dir + "/meta_bf16");
  fs::create_directories(f.dir + "/hf");
  std::vector<std::pair<std::string, at::Tensor>> meta, meta_bf16, main, side;
  for (const auto& [n, t] : f.weights) {
    meta.emplace_back(n, t);
    meta_bf16.emplace_back(n, t.to(at::kBFloat16));
    at::Tensor hf = heads_of(n) ? to_hf_rows(t, heads_of(n)) : t;
    auto [file, name] = hf_place(n);
    (file == "main" ? main : side).emplace_back(name, hf.contiguous());
  }
  write_safetensors(f.dir + "/meta/model.safetensors", meta);
  write_safetensors(f.dir + "/meta_bf16/consolidated.safetensors", meta_bf16);
  const std::string params =
      R"({"dim": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "vocab_size": -1, "multiple_of": 16, )"
      R"("norm_eps": 1e-05, "rope_theta": 10000.0, "n_future_tokens": 2, "max_seq_len": 128})";
  write_json(f.dir + "/meta/params.json", params);
  write_json(f.dir + "/meta_bf16/params.json", params);
  // Sharded HF directory with an index; a foreign config (no wmtp_model_args).
  std::vector<StTensorSpec> infos;
  std::map<std::string, at::Tensor> by_name;
  for (auto& [n, t] : main) infos.push_back({n, StDtype::F32, t.sizes().vec()}), by_name[n] = t;
  write_safetensors_model(
      f.dir + "/hf", infos, [&](const std::string& n) { return by_name.at(n); }, 60000);
  write_safetensors(f.dir + "/hf/mtp_extra_heads.safetensors", side);
  write_json(f.dir + "/hf/config.json",
             R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, )"
             R"("intermediate_size": 176, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, )"
             R"("rms_norm_eps": 1e-05, "rope_theta": 10000.0, "vocab_size": 50, "max_position_embeddings": 128, )"
             R"("tie_word_embeddings": false, "torch_dtype": "float32"})");
  return f;
}

const Fixture& inputs() {
  static Fixture f = make_inputs();  // test-local cache: built once per test binary
  return f;
}

CommandResult convert(const std::string& args) { return run_command(bin("convert-checkpoint") + " " + args); }
CommandResult merge(const std::string& args) { return run_command(bin("merge-lora") + " " + args); }

TEST(Convert, MetaAndHfImportsAreIdenticalAndExportRoundTrips) {
  const Fixture& f = inputs();
  auto r1 = convert("import --from meta --input " + f.dir + "/meta/model.safetensors --output " + f.dir + "/a.h5");
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto r2 = convert("import --from hf --input " + f.dir + "/hf --output " + f.dir + "/b.h5");
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  TensorMap a = read_model_group(f.dir + "/a.h5"), b = read_model_group(f.dir + "/b.h5");
  expect_same_maps(a, f.weights, "meta import vs original");
  expect_same_maps(b, a, "hf import vs meta import");
  CheckpointReader ra(f.dir + "/a.h5", MPI_COMM_NULL), rb(f.dir + "/b.h5", MPI_COMM_NULL);
  EXPECT_EQ(ra.header().kind, CheckpointKind::Model);
  EXPECT_EQ(model_args_from_text(ra.header().model_args_json, "a").vocab_size, 50);  // resolved from the embedding
  EXPECT_EQ(ra.header().model_args_json, rb.header().model_args_json);
  EXPECT_EQ(model_fingerprint(ra), model_fingerprint(rb));

  // Meta export reproduces the Meta input; HF export reproduces the HF input (files and names).
  ASSERT_EQ(convert("export --input " + f.dir + "/a.h5 --output " + f.dir + "/out_meta").exit_code, 0);
  expect_same_maps(read_all_safetensors(f.dir + "/out_meta"), read_all_safetensors(f.dir + "/meta/model.safetensors"),
                   "meta export");
  auto r3 = convert("export --input " + f.dir + "/b.h5 --output " + f.dir +
                    "/out_hf --names hf --max-shard-size 60000");
  ASSERT_EQ(r3.exit_code, 0) << r3.output;
  expect_same_maps(read_all_safetensors(f.dir + "/out_hf"), read_all_safetensors(f.dir + "/hf"), "hf export");
  expect_same_maps(read_all_safetensors(f.dir + "/out_hf/mtp_extra_heads.safetensors"),
                   read_all_safetensors(f.dir + "/hf/mtp_extra_heads.safetensors"), "hf sidecar");
  json::Value cfg = json::parse(read_file(f.dir + "/out_hf/config.json"));
  EXPECT_EQ(cfg.at("num_hidden_layers").as_int(), 3);
  EXPECT_EQ(cfg.at("intermediate_size").as_int(), 176);
  EXPECT_EQ(cfg.at("num_key_value_heads").as_int(), 2);
  EXPECT_TRUE(fs::exists(f.dir + "/out_hf/model.safetensors.index.json"));
  // The exported HF directory imports back to the same checkpoint (exact args this time).
  ASSERT_EQ(convert("import --from hf --input " + f.dir + "/out_hf --output " + f.dir + "/c.h5").exit_code, 0);
  expect_same_maps(read_model_group(f.dir + "/c.h5"), a, "hf export re-import");
}

TEST(Convert, Bf16ImportExportIsExact) {
  const Fixture& f = inputs();
  const std::string in = f.dir + "/meta_bf16/consolidated.safetensors";
  ASSERT_EQ(convert("import --from meta --input " + in + " --output " + f.dir + "/bf.h5").exit_code, 0);
  ASSERT_EQ(convert("import --from meta --input " + in + " --output " + f.dir + "/bf_stored.h5 --dtype bf16").exit_code,
            0);
  CheckpointReader r(f.dir + "/bf_stored.h5", MPI_COMM_NULL);
  EXPECT_EQ(r.tensor_dtype(kModelGroup, "output.weight"), "bfloat16");
  for (const char* h5 : {"/bf.h5", "/bf_stored.h5"}) {
    const std::string out = f.dir + "/bf_out" + std::string(h5).substr(1, std::string(h5).size() - 4);
    ASSERT_EQ(convert("export --input " + f.dir + h5 + " --output " + out + " --dtype bf16").exit_code, 0);
    expect_same_maps(read_all_safetensors(out), read_all_safetensors(in), std::string("bf16 round trip via ") + h5);
  }
}

TEST(Convert, ImportUnderMpirunEqualsOneProcess) {
  const Fixture& f = inputs();
  auto r = run_command(mpirun(2) + bin("convert-checkpoint") + " import --from hf --input " + f.dir + "/hf --output " +
                       f.dir + "/b_np2.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_maps(read_model_group(f.dir + "/b_np2.h5"), f.weights, "np2 import");
  CheckpointReader rr(f.dir + "/b_np2.h5", MPI_COMM_NULL);
  EXPECT_EQ(rr.header().world_size, 2);
  auto v = run_command(mpirun(2) + bin("convert-checkpoint") + " verify " + f.dir + "/b_np2.h5");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("0 problem(s)"), std::string::npos) << v.output;
}

TEST(Convert, InspectShowsTreeAndState) {
  const Fixture& f = inputs();
  ASSERT_EQ(
      convert("import --from meta --input " + f.dir + "/meta/model.safetensors --output " + f.dir + "/i.h5").exit_code,
      0);
  auto r = convert("inspect " + f.dir + "/i.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"wmtp-checkpoint v1, kind model", "layers.0.attention.wk.weight", "[32, 64]", "float32",
                        "extra_heads.0.feed_forward.w2.weight", "\"n_kv_heads\":2"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  auto s = convert("inspect " + f.dir + "/hf");
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_NE(s.output.find("model.layers.2.self_attn.q_proj.weight"), std::string::npos) << s.output;
}

// ---- merge-lora ----

struct LoraFiles {
  TensorMap adapters;
  double scaling;
};

LoraFiles make_lora(const Fixture& f, const std::string& base_h5, const std::string& out_h5) {
  LoraFiles l;
  at::manual_seed(5);
  const int64_t r = 4;
  l.scaling = 8.0 / r;
  for (const auto& [n, w] : f.weights) {
    for (const char* t : {".attention.wq.weight", ".attention.wk.weight", ".feed_forward.w2.weight"}) {
      const std::string suffix = t;
      if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
        const std::string stem = n.substr(0, n.size() - 7);
        l.adapters[stem + ".lora_A"] = at::randn({r, w.size(1)});
        l.adapters[stem + ".lora_B"] = at::randn({w.size(0), r});
      }
    }
  }
  LoraRecord info{r, 8.0, 0.0, {"wq", "wk", "w2"}, base_h5, ""};
  {
    CheckpointReader base(base_h5, MPI_COMM_NULL);
    info.base_fingerprint = model_fingerprint(base);
  }
  std::vector<TensorSpec> specs;
  for (const auto& [n, t] : l.adapters) specs.push_back({n, t.sizes().vec()});
  specs.push_back({"value_head.linear.weight", {1, 64}});
  ModelFileOptions mo;
  mo.kind = CheckpointKind::Lora;
  mo.lora = info;
  write_model_file(
      out_h5, MPI_COMM_NULL, model_args_json_text(convert_args()), specs,
      [&](const std::string& n) {
        return n == "value_head.linear.weight" ? at::full({1, 64}, 0.25f) : l.adapters.at(n);
      },
      mo);
  return l;
}

// base.h5 (the imported Meta input) and lora.h5 (adapters on it), made once.
const LoraFiles& base_and_lora(const Fixture& f) {
  static LoraFiles l = [&] {
    EXPECT_EQ(convert("import --from meta --input " + f.dir + "/meta/model.safetensors --output " + f.dir + "/base.h5")
                  .exit_code,
              0);
    return make_lora(f, f.dir + "/base.h5", f.dir + "/lora.h5");
  }();
  return l;
}

TEST(MergeLora, MergesExactlyAndPeftRoundTripsAndFingerprintGuards) {
  const Fixture& f = inputs();
  const LoraFiles& l = base_and_lora(f);

  auto r = merge("--base " + f.dir + "/base.h5 --lora " + f.dir + "/lora.h5 --output " + f.dir + "/merged.h5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  TensorMap merged = read_model_group(f.dir + "/merged.h5");
  int n_merged = 0;
  for (const auto& [n, w] : f.weights) {
    const std::string stem = n.substr(0, n.size() - 7);
    if (l.adapters.count(stem + ".lora_A")) {
      at::Tensor want = w.to(at::kDouble) + l.scaling * at::matmul(l.adapters.at(stem + ".lora_B").to(at::kDouble),
                                                                   l.adapters.at(stem + ".lora_A").to(at::kDouble));
      EXPECT_TRUE(at::allclose(merged.at(n).to(at::kDouble), want, 1e-5, 1e-5)) << n;
      ++n_merged;
    } else {
      EXPECT_TRUE(bitwise_equal(merged.at(n), w)) << n;
    }
  }
  EXPECT_EQ(n_merged, 3 * 4);  // wq, wk, w2 in 3 layer blocks + 1 extra head
  EXPECT_TRUE(at::equal(merged.at("value_head.linear.weight"), at::full({1, 64}, 0.25f)));

  // PEFT: export, check the file independently, merge from it: identical result.
  auto e = convert("export --input " + f.dir + "/lora.h5 --format peft --output " + f.dir + "/peft");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  json::Value cfg = json::parse(read_file(f.dir + "/peft/adapter_config.json"));
  EXPECT_EQ(cfg.at("peft_type").as_string(), "LORA");
  EXPECT_EQ(cfg.at("r").as_int(), 4);
  EXPECT_EQ(cfg.at("lora_alpha").as_double(), 8.0);
  SafetensorsFile pf(f.dir + "/peft/adapter_model.safetensors");
  EXPECT_TRUE(at::equal(pf.read("base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight"),
                        to_hf_rows(l.adapters.at("layers.1.attention.wq.lora_B"), 4)));
  EXPECT_TRUE(at::equal(pf.read("base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight"),
                        l.adapters.at("layers.1.attention.wk.lora_A")));
  EXPECT_TRUE(at::equal(pf.read("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"),
                        l.adapters.at("layers.0.feed_forward.w2.lora_B")));
  EXPECT_TRUE(fs::exists(f.dir + "/peft/adapter_mtp_heads.safetensors"));
  auto m2 = merge("--base " + f.dir + "/base.h5 --lora " + f.dir + "/peft --output " + f.dir + "/merged_peft.h5");
  ASSERT_EQ(m2.exit_code, 0) << m2.output;
  TensorMap merged_peft = read_model_group(f.dir + "/merged_peft.h5");
  for (const auto& [n, t] : f.weights) EXPECT_TRUE(bitwise_equal(merged_peft.at(n), merged.at(n))) << n;

  // PEFT import gives back the adapters exactly.
  auto imp = convert("import --from peft --input " + f.dir + "/peft --base " + f.dir + "/base.h5 --output " + f.dir +
                     "/lora2.h5");
  ASSERT_EQ(imp.exit_code, 0) << imp.output;
  TensorMap lora2 = read_model_group(f.dir + "/lora2.h5");
  expect_same_maps(lora2, l.adapters, "peft import");

  // HF output of the merge equals the HF export of the merged checkpoint.
  ASSERT_EQ(merge("--base " + f.dir + "/base.h5 --lora " + f.dir + "/lora.h5 --output " + f.dir +
                  "/merged_hf --output-format hf")
                .exit_code,
            0);
  ASSERT_EQ(
      convert("export --input " + f.dir + "/merged.h5 --output " + f.dir + "/merged_hf_export --names hf").exit_code,
      0);
  expect_same_maps(read_all_safetensors(f.dir + "/merged_hf"), read_all_safetensors(f.dir + "/merged_hf_export"),
                   "merge hf output");

  // A full checkpoint of a LoRA run holds base and adapters together: merging it alone is the same.
  {
    std::vector<TensorSpec> specs;
    TensorMap all = f.weights;
    for (const auto& [n, t] : l.adapters) all[n] = t;
    for (const auto& [n, t] : all) specs.push_back({n, t.sizes().vec()});
    ModelFileOptions mo;
    mo.kind = CheckpointKind::Full;
    mo.lora = LoraRecord{4, 8.0, 0.0, {"wq", "wk", "w2"}, "", ""};
    write_model_file(
        f.dir + "/full_run.h5", MPI_COMM_NULL, model_args_json_text(convert_args()), specs,
        [&](const std::string& n) { return all.at(n); }, mo);
  }
  auto full = merge("--base " + f.dir + "/full_run.h5 --output " + f.dir + "/merged_full.h5");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  TensorMap merged_full = read_model_group(f.dir + "/merged_full.h5");
  EXPECT_EQ(merged_full.size(), f.weights.size());  // adapters folded in, not copied
  for (const auto& [n, t] : f.weights) EXPECT_TRUE(bitwise_equal(merged_full.at(n), merged.at(n))) << n;

  // Another base: refused by fingerprint (exit 2, no output), accepted when told to.
  TensorMap other = f.weights;
  other["norm.weight"] = other["norm.weight"] + 1;
  {
    std::vector<TensorSpec> specs;
    for (const auto& [n, t] : other) specs.push_back({n, t.sizes().vec()});
    write_model_file(f.dir + "/other.h5", MPI_COMM_NULL, model_args_json_text(convert_args()), specs,
                     [&](const std::string& n) { return other.at(n); });
  }
  auto bad = merge("--base " + f.dir + "/other.h5 --lora " + f.dir + "/lora.h5 --output " + f.dir + "/nope.h5");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("fingerprint"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(f.dir + "/nope.h5"));
  EXPECT_FALSE(fs::exists(f.dir + "/nope.h5.tmp"));
  EXPECT_EQ(merge("--base " + f.dir + "/other.h5 --lora " + f.dir + "/lora.h5 --output " + f.dir +
                  "/forced.h5 --ignore-fingerprint")
                .exit_code,
            0);
  // A safetensors base is fingerprinted from its data: the Meta input matches base.h5.
  auto st = merge("--base " + f.dir + "/meta/model.safetensors --lora " + f.dir + "/lora.h5 --output " + f.dir +
                  "/from_st.h5");
  ASSERT_EQ(st.exit_code, 0) << st.output;
  TensorMap from_st = read_model_group(f.dir + "/from_st.h5");
  for (const auto& [n, t] : f.weights) EXPECT_TRUE(bitwise_equal(from_st.at(n), merged.at(n))) << n;
}

// Writes a model-only file of `weights` (tiny args).
void write_weights(const std::string& path, const TensorMap& weights) {
  std::vector<TensorSpec> specs;
  for (const auto& [n, t] : weights) specs.push_back({n, t.sizes().vec()});
  write_model_file(path, MPI_COMM_NULL, model_args_json_text(convert_args()), specs,
                   [&](const std::string& n) { return weights.at(n); });
}

// The base a LoRA run trained on travels with its adapters: a PEFT export records its fingerprint
// (and refuses when the base file it names has changed), and merge-lora and import --from peft
// refuse another base, naming both fingerprints.
TEST(MergeLora, PeftAdaptersKeepTheirBaseIdentity) {
  const Fixture& f = inputs();
  base_and_lora(f);
  TensorMap other = f.weights;
  other["layers.0.attention.wv.weight"] = other["layers.0.attention.wv.weight"] * 2;  // same shapes
  write_weights(f.dir + "/other_base.h5", other);
  const std::string want_fp = model_fingerprint(CheckpointReader(f.dir + "/base.h5", MPI_COMM_NULL));
  const std::string other_fp = model_fingerprint(CheckpointReader(f.dir + "/other_base.h5", MPI_COMM_NULL));

  auto e = convert("export --input " + f.dir + "/lora.h5 --format peft --output " + f.dir + "/peft_fp");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  std::string recorded;
  const SafetensorsFile adapter_file(f.dir + "/peft_fp/adapter_model.safetensors");
  for (const auto& [k, v] : adapter_file.header().metadata)
    if (k == "wmtp_base_fingerprint") recorded = v;
  EXPECT_EQ(recorded, want_fp);

  auto m = merge("--base " + f.dir + "/other_base.h5 --lora " + f.dir + "/peft_fp --output " + f.dir +
                 "/peft_other.h5");
  EXPECT_EQ(m.exit_code, 2) << m.output;
  EXPECT_NE(m.output.find(want_fp), std::string::npos) << m.output;
  EXPECT_NE(m.output.find(other_fp), std::string::npos) << m.output;
  EXPECT_FALSE(fs::exists(f.dir + "/peft_other.h5"));
  EXPECT_EQ(
      merge("--base " + f.dir + "/base.h5 --lora " + f.dir + "/peft_fp --output " + f.dir + "/peft_ok.h5").exit_code,
      0);

  auto i = convert("import --from peft --input " + f.dir + "/peft_fp --base " + f.dir + "/other_base.h5 --output " +
                   f.dir + "/peft_import_other.h5");
  EXPECT_EQ(i.exit_code, 2) << i.output;
  EXPECT_NE(i.output.find(other_fp), std::string::npos) << i.output;
  EXPECT_FALSE(fs::exists(f.dir + "/peft_import_other.h5"));

  // The LoRA checkpoint names a base file that has since been replaced by other weights.
  fs::copy_file(f.dir + "/base.h5", f.dir + "/moving_base.h5", fs::copy_options::overwrite_existing);
  make_lora(f, f.dir + "/moving_base.h5", f.dir + "/lora_moving.h5");
  fs::copy_file(f.dir + "/other_base.h5", f.dir + "/moving_base.h5", fs::copy_options::overwrite_existing);
  auto x = convert("export --input " + f.dir + "/lora_moving.h5 --format peft --output " + f.dir + "/peft_moved");
  EXPECT_EQ(x.exit_code, 2) << x.output;
  EXPECT_NE(x.output.find(want_fp), std::string::npos) << x.output;
  EXPECT_NE(x.output.find(other_fp), std::string::npos) << x.output;
  EXPECT_FALSE(fs::exists(f.dir + "/peft_moved/adapter_model.safetensors"));
}

// Exporting into a directory that already holds a model would leave its files beside the new ones
// (a stale shard index makes a re-import read the old weights): refused, nothing touched.
TEST(Convert, ExportRefusesADirectoryHoldingAModel) {
  const Fixture& f = inputs();
  base_and_lora(f);
  ASSERT_EQ(
      convert("import --from meta --input " + f.dir + "/meta/model.safetensors --output " + f.dir + "/x.h5").exit_code,
      0);
  const std::string out = f.dir + "/out_twice";
  ASSERT_EQ(convert("export --input " + f.dir + "/x.h5 --output " + out + " --max-shard-size 60000").exit_code, 0);
  ASSERT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  const std::string index_before = read_file(out + "/model.safetensors.index.json");
  auto again = convert("export --input " + f.dir + "/x.h5 --output " + out);
  EXPECT_EQ(again.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("model.safetensors.index.json"), std::string::npos) << again.output;
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  EXPECT_EQ(read_file(out + "/model.safetensors.index.json"), index_before);
  auto merged = merge("--base " + f.dir + "/x.h5 --lora " + f.dir + "/lora.h5 --output " + out);
  EXPECT_EQ(merged.exit_code, 2) << merged.output;
}

// NaN or Inf weights are refused on import and merge (exit 2, the tensor named, no output), not
// written for `verify` to find afterwards.
TEST(Convert, NonFiniteWeightsAreRefused) {
  const Fixture& f = inputs();
  base_and_lora(f);
  fs::create_directories(f.dir + "/meta_nan");
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& [n, t] : f.weights) tensors.emplace_back(n, n == "layers.1.ffn_norm.weight" ? t.clone() : t);
  for (auto& [n, t] : tensors)
    if (n == "layers.1.ffn_norm.weight") t[3] = std::numeric_limits<float>::quiet_NaN();
  write_safetensors(f.dir + "/meta_nan/model.safetensors", tensors);
  fs::copy_file(f.dir + "/meta/params.json", f.dir + "/meta_nan/params.json", fs::copy_options::overwrite_existing);
  auto imp = convert("import --from meta --input " + f.dir + "/meta_nan/model.safetensors --output " + f.dir +
                     "/nan.h5");
  EXPECT_EQ(imp.exit_code, 2) << imp.output;
  EXPECT_NE(imp.output.find("layers.1.ffn_norm.weight"), std::string::npos) << imp.output;
  EXPECT_NE(imp.output.find("NaN"), std::string::npos) << imp.output;
  EXPECT_FALSE(fs::exists(f.dir + "/nan.h5"));
  auto imp2 = run_command(mpirun(2) + bin("convert-checkpoint") + " import --from meta --input " + f.dir +
                          "/meta_nan/model.safetensors --output " + f.dir + "/nan_np2.h5");
  EXPECT_EQ(imp2.exit_code, 2) << imp2.output;
  EXPECT_FALSE(fs::exists(f.dir + "/nan_np2.h5"));

  // An adapter with an infinite value makes merged weights infinite: refused too.
  TensorMap adapters;
  {
    CheckpointReader r(f.dir + "/lora.h5", MPI_COMM_NULL);
    for (const auto& n : r.tensor_names(kModelGroup)) adapters[n] = r.read_tensor(kModelGroup, n);
  }
  adapters["layers.0.attention.wq.lora_B"][0][0] = std::numeric_limits<float>::infinity();
  {
    std::vector<TensorSpec> specs;
    for (const auto& [n, t] : adapters) specs.push_back({n, t.sizes().vec()});
    ModelFileOptions mo;
    mo.kind = CheckpointKind::Lora;
    mo.lora = CheckpointReader(f.dir + "/lora.h5", MPI_COMM_NULL).read_lora_record();
    // write_model_file refuses it too: write the file with HDF5 directly through the writer.
    CheckpointWriter w(f.dir + "/lora_inf.h5", MPI_COMM_NULL,
                       {CheckpointKind::Lora, model_args_json_text(convert_args()), 0});
    std::vector<TensorPiece> pieces;
    for (const auto& [n, t] : adapters) pieces.push_back({n, 0, t.reshape({-1})});
    w.write_tensors(kModelGroup, specs, pieces);
    w.write_lora_record(*mo.lora);
    w.close();
  }
  auto m = merge("--base " + f.dir + "/base.h5 --lora " + f.dir + "/lora_inf.h5 --output " + f.dir + "/inf_merged.h5");
  EXPECT_EQ(m.exit_code, 2) << m.output;
  EXPECT_NE(m.output.find("layers.0.attention.wq.weight"), std::string::npos) << m.output;
  EXPECT_FALSE(fs::exists(f.dir + "/inf_merged.h5"));
  auto mh = merge("--base " + f.dir + "/base.h5 --lora " + f.dir + "/lora_inf.h5 --output " + f.dir +
                  "/inf_merged_hf --output-format hf");
  EXPECT_EQ(mh.exit_code, 2) << mh.output;
  EXPECT_FALSE(fs::exists(f.dir + "/inf_merged_hf/model.safetensors"));
}

// Writes `cfg` as the adapter config in `dir`; reading the adapter must fail with an input error naming `fragment`.
void expect_peft_refused(const std::string& dir, const std::string& cfg, const std::string& fragment) {
  write_json(dir + "/adapter_config.json", cfg);
  try {
    read_peft_adapter(dir, convert_args());
    ADD_FAILURE() << "accepted: " << cfg;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Peft, UnsupportedAdaptersAreRefused) {
  const std::string dir = scratch_dir("ckpt_peft_refuse");
  write_safetensors(dir + "/adapter_model.safetensors",
                    {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", at::zeros({2, 64})},
                     {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", at::zeros({64, 2})}});
  auto expect_refused = [&](const std::string& cfg, const std::string& fragment) {
    expect_peft_refused(dir, cfg, fragment);
  };
  expect_refused(R"({"peft_type":"LORA","r":2,"lora_alpha":4,"use_dora":true})", "DoRA");
  expect_refused(R"({"peft_type":"LORA","r":2,"lora_alpha":4,"bias":"all"})", "bias");
  expect_refused(R"({"peft_type":"LORA","r":2,"lora_alpha":4,"modules_to_save":["lm_head"]})", "modules_to_save");
  expect_refused(R"({"peft_type":"LORA","r":2,"lora_alpha":4,"rank_pattern":{"q_proj":4}})", "rank_pattern");
  expect_refused(R"({"peft_type":"IA3"})", "LORA");
  expect_refused(R"({"peft_type":"LORA","r":3,"lora_alpha":4})", "r = 3");
  write_json(dir + "/adapter_config.json", R"({"peft_type":"LORA","r":2,"lora_alpha":4,"use_rslora":true})");
  LoraAdapter ok = read_peft_adapter(dir, convert_args());
  EXPECT_NEAR(ok.scaling(), 4.0 / std::sqrt(2.0), 1e-12);  // rsLoRA scaling kept
  write_safetensors(dir + "/adapter_model.safetensors",
                    {{"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", at::zeros({64})}});
  expect_refused(R"({"peft_type":"LORA","r":2,"lora_alpha":4})", "DoRA");
}

// Each remaining config setting and tensor check names its problem; a plain adapter comes back whole.
TEST(Peft, ConfigAndTensorChecksNameTheProblem) {
  const std::string dir = scratch_dir("ckpt_peft_checks");
  const std::string q = "base_model.model.model.layers.0.self_attn.q_proj.";
  auto expect_refused = [&](const std::string& cfg, const std::string& fragment) {
    expect_peft_refused(dir, cfg, fragment);
  };
  const std::string plain = R"({"peft_type":"LORA","r":2,"lora_alpha":4})";
  expect_refused(plain, "no adapter_model.safetensors");
  write_json(dir + "/adapter_model.bin", "pickle");
  expect_refused(plain, "only adapter_model.bin");
  write_safetensors(dir + "/adapter_model.safetensors",
                    {{q + "lora_A.weight", at::ones({2, 64})}, {q + "lora_B.weight", at::ones({64, 2})}});
  expect_refused(R"({"peft_type":"LORA","r":2,"lora_alpha":4,"lora_bias":true})", "lora_bias = true");
  expect_refused(R"({"peft_type":"LORA","r":2,"lora_alpha":4,"fan_in_fan_out":true})", "fan_in_fan_out");
  expect_refused(R"({"peft_type":"LORA","r":2,"lora_alpha":4,"alpha_pattern":{"q_proj":4}})", "alpha_pattern");
  expect_refused(R"({"peft_type":"LORA","r":0,"lora_alpha":4})", "r must be positive");
  expect_refused(R"({"peft_type":"LORA","r":2,"lora_alpha":"4"})", "'lora_alpha' must be a number");
  expect_refused(R"({"peft_type":"LORA","lora_alpha":4})", "r = 8");  // PEFT's default rank
  write_json(dir + "/adapter_config.json", R"({"peft_type":"LORA","r":2,"lora_alpha":4,"lora_dropout":0.25,)"
                                           R"("layers_to_transform":[0],"base_model_name_or_path":"/b"})");
  LoraAdapter ok = read_peft_adapter(dir, convert_args());
  EXPECT_EQ(ok.record.rank, 2);
  EXPECT_EQ(ok.record.alpha, 4.0);
  EXPECT_EQ(ok.record.dropout, 0.25);
  EXPECT_EQ(ok.record.base_path, "/b");
  EXPECT_EQ(ok.record.targets, std::vector<std::string>{"wq"});
  ASSERT_EQ(ok.tensors.size(), 2u);
  EXPECT_TRUE(at::equal(ok.tensors.at("layers.0.attention.wq.lora_A"), at::ones({2, 64})));
  auto with_tensors = [&](std::vector<std::pair<std::string, at::Tensor>> tensors, const std::string& fragment) {
    write_safetensors(dir + "/adapter_model.safetensors", tensors);
    expect_refused(plain, fragment);
  };
  with_tensors({{q + "lora_A.weight", at::ones({2, 64})}}, "has no matching 'layers.0.attention.wq.lora_B'");
  with_tensors({}, "the adapter has no LoRA tensors");
  with_tensors({{q + "bias", at::ones({64})}}, "trained biases");
  with_tensors({{q + "lora_A.weight", at::ones({2, 64}, at::kInt)}}, "not floating point");
  with_tensors({{"base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight", at::ones({2, 64})}},
               "is not a projection of this model");
  with_tensors({{"model.layers.0.self_attn.q_proj.lora_A.weight", at::ones({2, 64})}}, "key does not start with");
}

// ---- bad inputs: exit 2, a message naming the problem, no output file ----

void corrupt_copy(const std::string& from, const std::string& to, const std::function<void(std::string&)>& edit) {
  std::string bytes = read_file(from);
  edit(bytes);
  std::ofstream(to, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(Convert, BadInputsExit2WithoutOutput) {
  const Fixture& f = inputs();
  base_and_lora(f);  // a valid adapter file, so merge failures below come from the base
  const std::string good = f.dir + "/meta/model.safetensors";
  const std::string bad_dir = f.dir + "/bad";
  fs::create_directories(bad_dir);
  fs::copy_file(f.dir + "/meta/params.json", bad_dir + "/params.json", fs::copy_options::overwrite_existing);
  auto header_len = [&](const std::string& b) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(b[i]);
    return n;
  };
  struct Case {
    std::string name, fragment;
    std::function<void(std::string&)> edit;
  };
  std::vector<Case> cases = {
      {"truncated", "run past the data section", [](std::string& b) { b.resize(b.size() - 100); }},
      {"huge_header", "exceeds the limit",
       [](std::string& b) {
         for (int i = 0; i < 8; ++i) b[i] = char(0xff);
       }},
      {"header_past_eof", "runs past the end of the file", [](std::string& b) { b[3] = 1; }},
      {"lying_offsets", "needs",
       [&](std::string& b) {
         // Shrink the first "data_offsets":[0,N] end by rewriting one digit of the header in place.
         size_t p = b.find("\"data_offsets\":[0,");
         size_t q = b.find(']', p);
         b[q - 1] = b[q - 1] == '0' ? '1' : char(b[q - 1] - 1);
       }},
      {"unknown_dtype", "unknown dtype 'F33'",
       [&](std::string& b) {
         size_t p = b.find("\"F32\"");
         b.replace(p, 5, "\"F33\"");
       }},
      {"not_json", "invalid header JSON", [&](std::string& b) { b[8 + header_len(b) / 2] = '\x01'; }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string in = bad_dir + "/" + c.name + ".safetensors", out = f.dir + "/bad_" + c.name + ".h5";
    corrupt_copy(good, in, c.edit);
    auto r = convert("import --from meta --input " + in + " --output " + out);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.fragment), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(in), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out + ".tmp"));
    if (c.name == "truncated" || c.name == "unknown_dtype") {  // merge-lora reads bases the same way
      auto m = merge("--base " + in + " --params " + bad_dir + "/params.json --lora " + f.dir + "/lora.h5 --output " +
                     out);
      EXPECT_EQ(m.exit_code, 2) << m.output;
      EXPECT_FALSE(fs::exists(out));
    }
  }
  // Under mpirun too: one clean exit 2, no abort trace, no output.
  auto r = run_command(mpirun(2) + bin("convert-checkpoint") + " import --from meta --input " + bad_dir +
                       "/truncated.safetensors --output " + f.dir + "/bad_np2.h5");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_FALSE(fs::exists(f.dir + "/bad_np2.h5"));

  // Shape mismatch between params.json and the tensors: both shapes named.
  fs::create_directories(bad_dir + "/wide");
  fs::copy_file(good, bad_dir + "/wide/model.safetensors", fs::copy_options::overwrite_existing);
  write_json(bad_dir + "/wide/params.json", R"({"dim": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 4, )"
                                            R"("vocab_size": 50, "multiple_of": 16, "n_future_tokens": 2})");
  auto s = convert("import --from meta --input " + bad_dir + "/wide --output " + f.dir + "/wide.h5");
  EXPECT_EQ(s.exit_code, 2) << s.output;
  EXPECT_NE(s.output.find("layers.0.attention.wk.weight' has shape [32, 64] but the model args need [64, 64]"),
            std::string::npos)
      << s.output;
  EXPECT_FALSE(fs::exists(f.dir + "/wide.h5"));

  // A truncated HDF5 checkpoint: export / inspect / verify / merge exit 2 and write nothing.
  ASSERT_EQ(convert("import --from meta --input " + good + " --output " + f.dir + "/t.h5").exit_code, 0);
  fs::resize_file(f.dir + "/t.h5", fs::file_size(f.dir + "/t.h5") / 2);
  for (const std::string& cmd : {"export --input " + f.dir + "/t.h5 --output " + f.dir + "/t_out",
                                 "inspect " + f.dir + "/t.h5", "verify " + f.dir + "/t.h5"}) {
    auto r2 = convert(cmd);
    EXPECT_EQ(r2.exit_code, 2) << cmd << "\n" << r2.output;
    EXPECT_NE(r2.output.find("t.h5"), std::string::npos) << r2.output;
    EXPECT_NE(r2.output.find("truncated"), std::string::npos) << r2.output;
  }
  EXPECT_FALSE(fs::exists(f.dir + "/t_out/model.safetensors"));
  auto m = merge("--base " + f.dir + "/t.h5 --lora " + f.dir + "/lora.h5 --output " + f.dir + "/t_merged.h5");
  EXPECT_EQ(m.exit_code, 2) << m.output;
  EXPECT_FALSE(fs::exists(f.dir + "/t_merged.h5"));
}

}  // namespace
}  // namespace wmtp::test
