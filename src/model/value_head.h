// Value head (critic, docs/critic.md): per-token scalar value from the
// final-normed hidden state [B, S, H] -> [B, S].
//   mlp:    H -> H/4 -> GELU -> dropout -> H/8 -> GELU -> dropout -> 1   (names value_head.mlp.{0,3,6}.{weight,bias},
//           the indices of weighted_mtp's nn.Sequential); only the last layer is zero-initialized,
//           its bias set to bias_init; the others use PyTorch's default Linear init.
//   linear: H -> 1 (value_head.linear.{weight,bias}), weight zero, bias bias_init.
// These layers have biases (the transformer has none).
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "core/choice_names.h"
#include "model/param_init.h"
#include "model/param_source.h"
#include "model/param_spec.h"

namespace wmtp {

enum class ValueHeadType { Mlp, Linear };
// Its spellings: [value_head] type, [critic] value_head_type and a checkpoint's /value_head type.
inline const std::vector<std::string> kValueHeadTypeNames = {"mlp", "linear"};

struct ValueHeadConfig {
  bool enabled = false;  // attach a value head (the critic); the policy has none
  ValueHeadType type = ValueHeadType::Mlp;
  double dropout = 0.0;
  double bias_init = 0.0;  // initial prediction (0.5 for MC regression, 0.0 for pairwise)

  template <class V>
  void visit(V& v) {
    v.field("enabled", enabled, "attach a value head to the backbone");
    v.choice("type", type, kValueHeadTypeNames, "value head architecture");
    v.field("dropout", dropout, "dropout between the mlp layers");
    v.field("bias_init", bias_init, "bias of the last layer at init (= the initial value)");
  }
};

// Specs (unit "value_head", all trainable) in a fixed order. Throws Error(Usage) for dropout outside
// [0, 1), or a hidden size too small for the mlp (H < 8).
std::vector<ParamSpec> value_head_specs(int64_t hidden, const ValueHeadConfig& cfg);

// How value head parameter `fqn` starts (param_init.h draws it per (seed, FQN, element)).
InitRule value_head_init_rule(const std::string& fqn, int64_t hidden, const ValueHeadConfig& cfg);

// [B, S, H] -> [B, S]; `training` enables dropout.
at::Tensor value_head_forward(const UnitParams& p, const at::Tensor& hidden, const ValueHeadConfig& cfg, bool training);

}  // namespace wmtp
