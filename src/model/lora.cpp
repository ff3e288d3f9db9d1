// LoRA: target validation, the adapted linear, Kaiming init and merging into base weights.
#include "model/lora.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>

#include "core/error.h"

namespace wmtp {

namespace {
const std::vector<std::string> kCanonical = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};
const std::map<std::string, std::string> kAliases = {{"q_proj", "wq"}, {"k_proj", "wk"},    {"v_proj", "wv"},
                                                     {"o_proj", "wo"}, {"gate_proj", "w1"}, {"down_proj", "w2"},
                                                     {"up_proj", "w3"}};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

bool is_lora_tensor_name(const std::string& fqn) { return ends_with(fqn, ".lora_A") || ends_with(fqn, ".lora_B"); }

std::vector<std::string> lora_target_names(const LoraConfig& cfg) {
  if (cfg.rank <= 0) throw_usage("[lora] rank must be positive, got ", cfg.rank);
  if (!(cfg.dropout >= 0.0 && cfg.dropout < 1.0)) throw_usage("[lora] dropout must be in [0, 1), got ", cfg.dropout);
  std::vector<bool> on(kCanonical.size(), false);
  for (const auto& t : cfg.targets) {
    std::string name = t;
    auto alias = kAliases.find(t);
    if (alias != kAliases.end()) name = alias->second;
    bool found = false;
    for (size_t i = 0; i < kCanonical.size(); ++i)
      if (kCanonical[i] == name) on[i] = found = true;
    if (!found)
      throw_usage("[lora] unknown target '", t, "' (expected wq wk wv wo w1 w2 w3 or q_proj k_proj v_proj o_proj ",
                  "gate_proj up_proj down_proj)");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < kCanonical.size(); ++i)
    if (on[i]) out.push_back(kCanonical[i]);
  if (out.empty()) throw_usage("[lora] targets is empty");
  return out;
}

at::Tensor lora_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& lora_A,
                       const at::Tensor& lora_B, double scaling, double dropout, bool training) {
  at::Tensor y = at::linear(x, weight);
  if (!lora_A.defined()) return y;
  at::Tensor xin = (training && dropout > 0.0) ? at::dropout(x, dropout, /*train=*/true) : x;
  return y + at::linear(at::linear(xin, lora_A), lora_B) * scaling;
}

int merge_lora(std::unordered_map<std::string, at::Tensor>& params, double scaling) {
  std::vector<std::string> prefixes;
  for (const auto& kv : params)
    if (ends_with(kv.first, ".lora_A")) prefixes.push_back(kv.first.substr(0, kv.first.size() - 7));
  for (const auto& kv : params)
    if (ends_with(kv.first, ".lora_B") && !params.count(kv.first.substr(0, kv.first.size() - 7) + ".lora_A"))
      throw_input("LoRA merge: '", kv.first, "' has no matching lora_A");
  c10::NoGradGuard no_grad;
  for (const auto& p : prefixes) {
    auto b = params.find(p + ".lora_B");
    auto w = params.find(p + ".weight");
    if (b == params.end()) throw_input("LoRA merge: '", p, ".lora_A' has no matching lora_B");
    if (w == params.end()) throw_input("LoRA merge: '", p, ".lora_A' has no base weight '", p, ".weight'");
    const at::Tensor& A = params.at(p + ".lora_A");
    const at::Tensor& B = b->second;
    at::Tensor& W = w->second;
    if (A.dim() != 2 || B.dim() != 2 || W.dim() != 2 || A.size(0) != B.size(1) || B.size(0) != W.size(0) ||
        A.size(1) != W.size(1))
      throw_input("LoRA merge: shapes of '", p, "' disagree: weight ", W.sizes(), ", lora_A ", A.sizes(), ", lora_B ",
                  B.sizes());
    at::Tensor merged = W.to(at::kFloat) + at::matmul(B.to(at::kFloat), A.to(at::kFloat)) * scaling;
    W = merged.to(W.scalar_type());
  }
  for (const auto& p : prefixes) {
    params.erase(p + ".lora_A");
    params.erase(p + ".lora_B");
  }
  return static_cast<int>(prefixes.size());
}

}  // namespace wmtp
