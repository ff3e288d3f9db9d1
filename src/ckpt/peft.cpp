// PEFT adapter directories <-> LoraAdapter (see peft.h).
#include "ckpt/peft.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "ckpt/hf_config.h"
#include "ckpt/safetensors.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/json.h"
#include "model/names.h"

namespace fs = std::filesystem;

namespace wmtp {

namespace {

const char* kPrefix = "base_model.model.";
const char* kTargetOrder[] = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// "layers.3.attention.wq.lora_A" -> "wq"
std::string target_of(const std::string& meta) {
  std::string module = meta.substr(0, meta.rfind('.'));
  return module.substr(module.rfind('.') + 1);
}

std::vector<std::string> canonical_targets(const std::set<std::string>& found) {
  std::vector<std::string> out;
  for (const char* t : kTargetOrder)
    if (found.count(t)) out.push_back(t);
  return out;
}

}  // namespace

std::optional<std::vector<int64_t>> projection_weight_shape(const std::string& meta_weight, const ModelArgs& a) {
  int64_t index = -1, limit = 0;
  std::string rest;
  for (auto [prefix, n] : {std::pair<std::string, int64_t>{"layers.", a.n_layer_blocks()},
                           std::pair<std::string, int64_t>{"extra_heads.", a.n_extra_heads()}}) {
    if (meta_weight.compare(0, prefix.size(), prefix) != 0) continue;
    size_t dot = meta_weight.find('.', prefix.size());
    if (dot == std::string::npos) return std::nullopt;
    try {
      index = std::stoll(meta_weight.substr(prefix.size(), dot - prefix.size()));
    } catch (const std::exception&) {
      return std::nullopt;
    }
    limit = n;
    rest = meta_weight.substr(dot + 1);
  }
  if (index < 0 || index >= limit) return std::nullopt;
  const int64_t D = a.dim, HE = a.n_heads * a.head_dim(), GE = a.kv_heads() * a.head_dim(), F = ffn_hidden_dim(a);
  if (rest == "attention.wq.weight") return std::vector<int64_t>{HE, D};
  if (rest == "attention.wk.weight" || rest == "attention.wv.weight") return std::vector<int64_t>{GE, D};
  if (rest == "attention.wo.weight") return std::vector<int64_t>{D, HE};
  if (rest == "feed_forward.w1.weight" || rest == "feed_forward.w3.weight") return std::vector<int64_t>{F, D};
  if (rest == "feed_forward.w2.weight") return std::vector<int64_t>{D, F};
  return std::nullopt;
}

void write_peft_adapter(const std::string& dir, const LoraAdapter& adapter, const ModelArgs& args, StoreDtype dtype) {
  std::vector<std::pair<std::string, at::Tensor>> main, heads;
  std::set<std::string> hf_targets;
  for (const auto& [meta, t] : adapter.tensors) {
    if (!ends_with(meta, ".lora_A") && !ends_with(meta, ".lora_B"))
      throw_usage("PEFT export: '", meta, "' is not a LoRA tensor");
    at::Tensor x = t.to(at::kFloat);
    if (ends_with(meta, ".lora_B"))
      if (int64_t heads_n = rotary_permutation_heads(meta, args)) x = permute_rotary_meta_to_hf(x, heads_n);
    x = x.to(scalar_type_of(st_dtype_of(dtype))).contiguous();
    if (auto hf = meta_to_hf_name(meta)) {
      main.emplace_back(kPrefix + *hf + ".weight", x);
    } else if (auto side = meta_to_sidecar_name(meta)) {
      heads.emplace_back(kPrefix + *side + ".weight", x);
    } else {
      throw_usage("PEFT export: '", meta, "' has no HF module name");
    }
    hf_targets.insert(*meta_target_to_hf(target_of(meta)));
  }
  json::Value targets = json::Value::array();
  for (const auto& t : hf_targets) targets.push(t);
  json::Value cfg = json::Value::object();
  cfg.set("peft_type", "LORA").set("task_type", "CAUSAL_LM");
  cfg.set("r", adapter.record.rank).set("lora_alpha", adapter.record.alpha).set("lora_dropout", adapter.record.dropout);
  cfg.set("target_modules", std::move(targets));
  cfg.set("bias", "none").set("fan_in_fan_out", false).set("use_rslora", false).set("use_dora", false);
  cfg.set("modules_to_save", json::Value()).set("init_lora_weights", true).set("inference_mode", true);
  cfg.set("rank_pattern", json::Value::object()).set("alpha_pattern", json::Value::object());
  cfg.set("layers_to_transform", json::Value()).set("layers_pattern", json::Value());
  cfg.set("base_model_name_or_path",
          adapter.record.base_path.empty() ? json::Value() : json::Value(adapter.record.base_path));
  cfg.set("revision", json::Value());

  std::error_code ec;
  fs::create_directories(dir, ec);
  std::vector<std::string> written;
  try {
    const std::string weights = (fs::path(dir) / kPeftWeightsFile).string();
    // PEFT ignores extra metadata; wmtp reads the base fingerprint back (import, merge-lora).
    StMetadata metadata = {{"format", "pt"}};
    if (!adapter.record.base_fingerprint.empty())
      metadata.emplace_back(kPeftFingerprintKey, adapter.record.base_fingerprint);
    write_safetensors(weights, main, metadata);
    written.push_back(weights);
    if (!heads.empty()) {
      const std::string side = (fs::path(dir) / kPeftMtpHeadsFile).string();
      write_safetensors(side, heads);
      written.push_back(side);
    }
    write_file_atomically((fs::path(dir) / kPeftConfigFile).string(), json::dump(cfg) + "\n");
  } catch (...) {
    for (const auto& f : written) std::remove(f.c_str());
    throw;
  }
}

namespace {

bool is_true(const json::Value& cfg, const char* k) {
  const json::Value* v = cfg.find(k);
  return v && v->is_bool() && v->as_bool();
}

bool non_empty(const json::Value& cfg, const char* k) {
  const json::Value* v = cfg.find(k);
  if (!v || v->is_null()) return false;
  if (v->is_array()) return !v->as_array().empty();
  if (v->is_object()) return !v->as_object().empty();
  return true;
}

// Refuses every adapter_config.json setting beyond plain LoRA. layers_to_transform is harmless: the
// keys present say which layers are adapted.
void refuse_unsupported(const json::Value& cfg, const std::string& cfg_path) {
  auto refuse = [&](const auto&... why) {
    throw_input(cfg_path, ": ", why..., " — wmtp supports plain LoRA adapters only");
  };
  const json::Value* type = cfg.find("peft_type");
  if (!type || !type->is_string() || type->as_string() != "LORA") throw_input(cfg_path, ": peft_type is not \"LORA\"");
  if (is_true(cfg, "use_dora")) refuse("use_dora = true (DoRA)");
  if (const json::Value* b = cfg.find("bias"); b && !(b->is_string() && b->as_string() == "none"))
    refuse("bias = ", json::dump(*b), " (trained biases)");
  if (is_true(cfg, "lora_bias")) refuse("lora_bias = true");
  if (non_empty(cfg, "modules_to_save")) refuse("modules_to_save is set (fully trained extra modules)");
  if (is_true(cfg, "fan_in_fan_out")) refuse("fan_in_fan_out = true (Conv1D layout)");
  if (non_empty(cfg, "rank_pattern") || non_empty(cfg, "alpha_pattern"))
    refuse("rank_pattern/alpha_pattern (per-module ranks)");
}

// Rank, alpha, dropout and base path, with PEFT's defaults where a key is absent.
LoraRecord read_lora_settings(const json::Value& cfg, const std::string& cfg_path) {
  auto number = [&](const char* k, double def) {
    const json::Value* v = cfg.find(k);
    if (!v || v->is_null()) return def;
    if (!v->is_number()) throw_input(cfg_path, ": '", k, "' must be a number");
    return v->as_double();
  };
  LoraRecord info;
  const json::Value* r = cfg.find("r");
  info.rank = r && r->is_int() ? r->as_int() : 8;  // PEFT's default
  if (info.rank <= 0) throw_input(cfg_path, ": r must be positive");
  info.alpha = number("lora_alpha", 8.0);
  info.dropout = number("lora_dropout", 0.0);
  if (is_true(cfg, "use_rslora")) info.alpha *= std::sqrt(double(info.rank));  // alpha/r == alpha_peft/sqrt(r)
  if (const json::Value* b = cfg.find("base_model_name_or_path"); b && b->is_string()) info.base_path = b->as_string();
  return info;
}

std::string weights_path(const fs::path& root, const std::string& dir) {
  const fs::path weights = root / kPeftWeightsFile;
  if (!fs::exists(weights)) {
    if (fs::exists(root / "adapter_model.bin"))
      throw_input(dir, ": only adapter_model.bin (a pickle) is present; save the adapter with safe_serialization=True");
    throw_input(dir, ": no ", kPeftWeightsFile);
  }
  return weights.string();
}

// One tensor of an adapter file, checked against the model and the rank: its Meta name and its value
// in Meta's layout.
std::pair<std::string, at::Tensor> read_adapter_tensor(const SafetensorsFile& f, const std::string& key, bool sidecar,
                                                       int64_t rank, const ModelArgs& args) {
  auto bad = [&](const auto&... why) { throw_input(f.path(), ": tensor '", key, "': ", why...); };
  if (key.compare(0, std::strlen(kPrefix), kPrefix) != 0) bad("key does not start with ", kPrefix);
  if (key.find("lora_magnitude_vector") != std::string::npos) bad("DoRA magnitude vectors are not supported");
  if (key.find("lora_embedding_") != std::string::npos) bad("embedding adapters are not supported");
  if (ends_with(key, ".bias")) bad("trained biases are not supported");
  if (!ends_with(key, ".lora_A.weight") && !ends_with(key, ".lora_B.weight")) bad("not a lora_A/lora_B weight");
  const std::string hf = key.substr(std::strlen(kPrefix), key.size() - std::strlen(kPrefix) - 7);
  auto meta = sidecar ? sidecar_to_meta_name(hf) : hf_to_meta_name(hf);
  if (!meta) bad("no LLaMA projection of this name");
  const std::string base = meta->substr(0, meta->size() - 7) + ".weight";
  auto w = projection_weight_shape(base, args);
  if (!w)
    bad("'", base, "' is not a projection of this model (", args.n_layer_blocks(), " layers, ", args.n_extra_heads(),
        " extra heads)");
  at::Tensor t = f.read(key);
  if (!at::isFloatingType(t.scalar_type())) bad("not floating point");
  t = t.to(at::kFloat);
  const bool is_a = ends_with(*meta, ".lora_A");
  const std::vector<int64_t> want = is_a ? std::vector<int64_t>{rank, (*w)[1]} : std::vector<int64_t>{(*w)[0], rank};
  if (t.sizes().vec() != want)
    bad("shape ", t.sizes(), " but r = ", rank, " and the base weight ", base, " [", (*w)[0], ", ", (*w)[1], "] need [",
        want[0], ", ", want[1], "]");
  if (!is_a)
    if (int64_t heads = rotary_permutation_heads(*meta, args)) t = permute_rotary_hf_to_meta(t, heads);
  return {*meta, t};
}

void check_pairs(const std::string& dir, const std::map<std::string, at::Tensor>& tensors) {
  for (const auto& [name, t] : tensors) {
    const std::string other = name.substr(0, name.size() - 1) + (name.back() == 'A' ? "B" : "A");
    if (!tensors.count(other)) throw_input(dir, ": '", name, "' has no matching '", other, "'");
  }
  if (tensors.empty()) throw_input(dir, ": the adapter has no LoRA tensors");
}

}  // namespace

LoraAdapter read_peft_adapter(const std::string& dir, const ModelArgs& args) {
  const fs::path root(dir);
  const std::string cfg_path = (root / kPeftConfigFile).string();
  if (!fs::exists(cfg_path)) throw_input(dir, ": no ", kPeftConfigFile, " (not a PEFT adapter directory)");
  const json::Value cfg = read_json_file(cfg_path);
  if (!cfg.is_object()) throw_input(cfg_path, ": not a JSON object");
  refuse_unsupported(cfg, cfg_path);
  LoraAdapter a;
  a.record = read_lora_settings(cfg, cfg_path);
  auto take = [&](const SafetensorsFile& f, bool sidecar) {
    for (const std::string& key : f.names()) {
      auto [meta, t] = read_adapter_tensor(f, key, sidecar, a.record.rank, args);
      a.tensors[meta] = t;
    }
  };
  const SafetensorsFile weights_file(weights_path(root, dir));
  for (const auto& [k, v] : weights_file.header().metadata)
    if (k == kPeftFingerprintKey) a.record.base_fingerprint = v;
  take(weights_file, false);
  if (fs::exists(root / kPeftMtpHeadsFile)) take(SafetensorsFile((root / kPeftMtpHeadsFile).string()), true);
  check_pairs(dir, a.tensors);
  std::set<std::string> targets;
  for (const auto& [name, t] : a.tensors) targets.insert(target_of(name));
  a.record.targets = canonical_targets(targets);
  return a;
}

}  // namespace wmtp
