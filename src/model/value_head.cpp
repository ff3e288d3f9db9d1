// Value head: specs, init and forward for the mlp and linear variants.
#include "model/value_head.h"

#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "model/param_init.h"

namespace wmtp {

namespace {
void check_config(int64_t hidden, const ValueHeadConfig& cfg) {
  if (!(cfg.dropout >= 0.0 && cfg.dropout < 1.0))
    throw_usage("value head dropout must be in [0, 1), got ", cfg.dropout);
  if (cfg.type == ValueHeadType::Mlp && hidden < 8)
    throw_usage("value head 'mlp' needs a hidden size >= 8, got ", hidden);
}

// (in, out) of each Linear of the head, with its FQN stem.
struct LinearShape {
  std::string stem;
  int64_t in, out;
};
std::vector<LinearShape> linear_shapes(int64_t h, const ValueHeadConfig& cfg) {
  if (cfg.type == ValueHeadType::Linear) return {{"value_head.linear", h, 1}};
  return {{"value_head.mlp.0", h, h / 4}, {"value_head.mlp.3", h / 4, h / 8}, {"value_head.mlp.6", h / 8, 1}};
}
}  // namespace

std::vector<ParamSpec> value_head_specs(int64_t hidden, const ValueHeadConfig& cfg) {
  check_config(hidden, cfg);
  std::vector<ParamSpec> specs;
  for (const auto& l : linear_shapes(hidden, cfg)) {
    specs.push_back({l.stem + ".weight", "value_head", {l.out, l.in}, true});
    specs.push_back({l.stem + ".bias", "value_head", {l.out}, true});
  }
  return specs;
}

InitRule value_head_init_rule(const std::string& fqn, int64_t hidden, const ValueHeadConfig& cfg) {
  auto shapes = linear_shapes(hidden, cfg);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& l = shapes[i];
    const bool weight = fqn == l.stem + ".weight", bias = fqn == l.stem + ".bias";
    if (!weight && !bias) continue;
    // The last layer starts at zero so the initial value is exactly bias_init for every token.
    if (i + 1 == shapes.size()) return InitRule::constant(bias ? cfg.bias_init : 0.0);
    return InitRule::uniform(1.0 / std::sqrt(static_cast<double>(l.in)));  // PyTorch's Linear default
  }
  throw_usage("value head: no parameter '", fqn, "'");
}

at::Tensor value_head_forward(const UnitParams& p, const at::Tensor& hidden, const ValueHeadConfig& cfg,
                              bool training) {
  if (cfg.type == ValueHeadType::Linear)
    return at::linear(hidden, p.at("value_head.linear.weight"), p.at("value_head.linear.bias")).squeeze(-1);
  const bool drop = training && cfg.dropout > 0.0;
  at::Tensor x = at::gelu(at::linear(hidden, p.at("value_head.mlp.0.weight"), p.at("value_head.mlp.0.bias")));
  if (drop) x = at::dropout(x, cfg.dropout, true);
  x = at::gelu(at::linear(x, p.at("value_head.mlp.3.weight"), p.at("value_head.mlp.3.bias")));
  if (drop) x = at::dropout(x, cfg.dropout, true);
  return at::linear(x, p.at("value_head.mlp.6.weight"), p.at("value_head.mlp.6.bias")).squeeze(-1);
}

}  // namespace wmtp
