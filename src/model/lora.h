// LoRA on the block projections (docs/model.md):
//   y = W x + (alpha/rank) * B(A(dropout(x))),  A [rank, in] Kaiming-uniform(a=sqrt 5), B [out, rank] zero.
// Names: the base weight keeps its Meta FQN ("layers.0.attention.wq.weight"); the adapter adds
// "layers.0.attention.wq.lora_A" and "...wq.lora_B" (base FQN minus ".weight"). Base weights are
// frozen when LoRA is enabled. merge_lora folds the adapters into the base weights in fp32.
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <unordered_map>
#include <vector>

namespace wmtp {

struct LoraConfig {
  bool enabled = false;
  int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  // Meta names wq wk wv wo w1 w2 w3; HF names q_proj k_proj v_proj o_proj gate_proj up_proj down_proj
  // are accepted as aliases (gate=w1, up=w3, down=w2).
  std::vector<std::string> targets = {"wq", "wk", "wv", "wo"};

  double scaling() const { return alpha / static_cast<double>(rank); }

  template <class V>
  void visit(V& v) {
    v.field("enabled", enabled, "train LoRA adapters instead of the base weights");
    v.field("rank", rank, "adapter rank r");
    v.field("alpha", alpha, "scaling numerator: the update is (alpha/r) B A");
    v.field("dropout", dropout, "dropout on the adapter input");
    v.field("targets", targets, "projections to adapt: wq wk wv wo w1 w2 w3 (or HF q_proj ... down_proj)");
  }
};

// Whether `fqn` names an adapter tensor ("<proj>.lora_A" / "<proj>.lora_B").
bool is_lora_tensor_name(const std::string& fqn);

// Canonical Meta target names ("wq", ..., "w3"), deduplicated, in the order wq wk wv wo w1 w2 w3.
// Throws Error(Usage) for an unknown target, rank <= 0 or dropout outside [0, 1).
std::vector<std::string> lora_target_names(const LoraConfig& cfg);

// x @ W^T plus the adapter branch when A/B are defined. `training` enables the adapter dropout.
at::Tensor lora_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& lora_A,
                       const at::Tensor& lora_B, double scaling, double dropout, bool training);

// W += scaling * B @ A (computed in fp32, written back in W's dtype) for every "<p>.lora_A" with its
// "<p>.lora_B" and "<p>.weight" in `params`; the adapter entries are then removed. Returns the
// number of merged projections. Throws Error(Input) when a pair is incomplete or shapes disagree.
int merge_lora(std::unordered_map<std::string, at::Tensor>& params, double scaling);

}  // namespace wmtp
