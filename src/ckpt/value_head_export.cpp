// Value-head export (see value_head_export.h).
#include "ckpt/value_head_export.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "ckpt/safetensors.h"
#include "core/choice_names.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/json.h"

namespace fs = std::filesystem;

namespace wmtp {

namespace {
constexpr const char* kPrefix = "value_head.";
constexpr size_t kPrefixLen = 11;
}  // namespace

bool is_value_head_tensor_name(const std::string& name) { return name.rfind(kPrefix, 0) == 0; }

std::vector<std::string> export_value_head(const CheckpointReader& r, const std::string& dir, StoreDtype dtype) {
  std::map<std::string, std::string> names;  // file key -> /model name
  std::vector<StTensorSpec> tensors;
  for (const auto& n : r.tensor_names(kModelGroup)) {
    if (!is_value_head_tensor_name(n)) continue;
    const std::string key = n.substr(kPrefixLen);
    names[key] = n;
    tensors.push_back({key, st_dtype_of(dtype), r.tensor_shape(kModelGroup, n)});
  }
  if (tensors.empty()) return {};

  ValueHeadRecord info;
  const std::optional<ValueHeadRecord> stored = r.read_value_head_record();
  if (stored) {
    info = *stored;
  } else {  // a merged file (merge-lora keeps the tensors, not /value_head): what the tensors say
    info.type = names.count("linear.weight") ? ValueHeadType::Linear : ValueHeadType::Mlp;
    const std::string first = info.type == ValueHeadType::Linear ? "linear.weight" : "mlp.0.weight";
    if (!names.count(first)) throw_input(r.header().path, ": value head tensors without /model/value_head.", first);
    info.hidden = r.tensor_shape(kModelGroup, names.at(first)).back();
  }
  json::Value cfg = json::Value::object();
  cfg.set("type", choice_name(kValueHeadTypeNames, info.type));
  cfg.set("hidden_size", info.hidden);
  cfg.set("dropout", stored ? json::Value(info.dropout) : json::Value());  // null: not recorded
  cfg.set("bias_init", stored ? json::Value(info.bias_init) : json::Value());
  cfg.set("layers", info.type == ValueHeadType::Mlp
                        ? "mlp.0: H -> H/4, GELU, dropout, mlp.3: H/4 -> H/8, GELU, dropout, mlp.6: H/8 -> 1"
                        : "linear: H -> 1");
  cfg.set("input", "the backbone's final-normed hidden state (HF last_hidden_state), per token");

  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string weights = (fs::path(dir) / kValueHeadWeightsFile).string();
  const std::string config = (fs::path(dir) / kValueHeadConfigFile).string();
  write_safetensors(weights, tensors, [&](const std::string& key) {
    return r.read_tensor(kModelGroup, names.at(key)).to(scalar_type_of(st_dtype_of(dtype))).contiguous();
  });
  try {
    write_file_atomically(config, json::dump(cfg) + "\n");
  } catch (...) {
    std::remove(weights.c_str());
    throw;
  }
  return {weights, config};
}

}  // namespace wmtp
