// MtpModel: Meta's multi-token-prediction transformer (docs/model.md) written functionally.
//
//   tokens -> tok_embeddings -> layers[0 .. n_trunk-1] (trunk) -> z
//   head 0 = layers[n_trunk](z), head j>=1 = extra_heads[j-1](z)        (every head reads z)
//   logits_k = output(norm(head_k))   (one shared norm and output)      head k predicts t+k+1
//
// A value model (value_head.enabled; the critic) is an n_future = 1 backbone whose final-normed
// hidden state feeds the value head: it has no output projection at all (no output.weight, no
// logits), like HF's LlamaModel under weighted_mtp's ValueModel — so a value forward gathers nothing
// V-sized, and an NTP or MTP checkpoint's output.weight / extra_heads.* are simply not read.
//
// The model owns no weights. Each unit — "tok_embeddings", "layers.{i}", "extra_heads.{j}",
// "norm" (norm.weight), "output" (output.weight) and "value_head" — asks the ParamSource for its tensors
// right before it runs (begin_unit) and reports its output right after (end_unit); see
// param_source.h. The compute dtype is the dtype of the tensors the source returns: LocalParams with
// fp32 masters computes in fp32; the sharding engine with param_dtype = bf16 returns bf16 views and
// the whole forward runs in bf16 (RMSNorm, RoPE, attention softmax and the loss upcast to fp32
// internally). With activation checkpointing each block runs through run_checkpointed
// (activation_checkpoint.h): its forward's end_unit gets an output that does not require grad, and the
// backward re-runs begin_unit/end_unit for the recompute.
//
// Parameter FQNs are Meta's (see param_specs); LoRA adds "<proj>.lora_A"/"<proj>.lora_B" next to the
// projection's ".weight"; the value head adds "value_head.*".
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/lora.h"
#include "model/model_args.h"
#include "model/param_init.h"
#include "model/param_source.h"
#include "model/param_spec.h"
#include "model/transformer.h"
#include "model/value_head.h"

namespace wmtp {

struct ForwardOptions {
  bool training = false;                  // dropout on (LoRA adapters, value head)
  bool activation_checkpointing = false;  // recompute each block in backward
};

class MtpModel {
 public:
  // `freeze_base`: base weights not trainable even without LoRA (a critic with a frozen backbone).
  // LoRA enabled always freezes them. Throws Error(Usage) on invalid args or configs (vocab_size must
  // be resolved).
  explicit MtpModel(ModelArgs args, LoraConfig lora = {}, ValueHeadConfig value_head = {}, bool freeze_base = false);

  const ModelArgs& args() const { return args_; }
  const LoraConfig& lora() const { return lora_; }
  const ValueHeadConfig& value_head() const { return value_head_; }
  int64_t n_future() const { return args_.n_future_tokens; }

  // Every parameter, in a fixed order: tok_embeddings, layers.0.., extra_heads.0.., norm.weight,
  // then output.weight or (a value model) value_head.*. Within a block: attention.wq wk wv wo,
  // feed_forward.w1 w2 w3 (each followed by its lora_A, lora_B when adapted), attention_norm,
  // ffn_norm. Trainable: everything, or with LoRA / freeze_base only lora_* and value_head.*.
  std::vector<ParamSpec> param_specs() const;
  // Unit names in execution order.
  std::vector<std::string> unit_names() const;
  // Block prefix of head k: "layers.{n_trunk}" for k = 0, "extra_heads.{k-1}" otherwise.
  std::string head_unit(int64_t head) const;
  // The RoPE / causal-mask tables every block of this model (and of its copies) shares.
  AttentionTables& attention_tables() const { return *tables_; }

  // How parameter `fqn` starts: weights ~ N(0, 0.02), norms = 1, lora_A Kaiming-uniform(a=sqrt 5),
  // lora_B = 0, value head as value_head.h. Throws Error(Usage) for an FQN the model does not have.
  InitRule init_rule(const std::string& fqn) const;
  // Elements [offset, offset + out.numel()) of the flattened initial value of `fqn` into `out` (1-D,
  // any float dtype and device): a function of (seed, FQN, element index) only (param_init.h), so a
  // rank can initialize exactly its shards and any split reproduces init_params bit for bit.
  void init_range(const std::string& fqn, int64_t offset, const at::Tensor& out, uint64_t seed) const;
  // fp32 CPU tensors for every spec, from init_range (the single-process path; tests, small tools).
  // requires_grad is not set (LocalParams / the engine decide).
  std::unordered_map<std::string, at::Tensor> init_params(uint64_t seed) const;

  // ---- forward pieces (each runs its units through the ParamSource) ----
  // tokens [B, S] int64 -> z [B, S, D]: embedding + trunk blocks.
  at::Tensor forward_trunk(ParamSource& src, const at::Tensor& tokens, const ForwardOptions& opt) const;
  // Head block k on the trunk output: [B, S, D] -> [B, S, D].
  at::Tensor forward_head_block(ParamSource& src, int64_t head, const at::Tensor& z, const ForwardOptions& opt) const;
  // The shared final RMSNorm ("norm" unit): [..., D] -> [..., D].
  at::Tensor forward_norm(ParamSource& src, const at::Tensor& h) const;
  // Shared norm + output on head hidden states [..., D] -> [..., V] ("norm" then "output" unit).
  // Throws Error(Usage) for a value model.
  at::Tensor forward_output(ParamSource& src, const at::Tensor& h) const;

  // ---- whole-model forwards ----
  // All heads [B, S, K, V] (training / the reference loss path) or head 0 only [B, S, 1, V].
  at::Tensor forward_logits(ParamSource& src, const at::Tensor& tokens, const ForwardOptions& opt,
                            bool all_heads = true) const;
  // norm(head 0 block(z)) [B, S, D]: the final-normed hidden state a value head reads
  // (= HF last_hidden_state for an n_future = 1 model). Runs the "norm" unit, never "output".
  at::Tensor forward_hidden(ParamSource& src, const at::Tensor& tokens, const ForwardOptions& opt) const;
  // Value head on forward_hidden: [B, S] per-token values (needs value_head.enabled).
  at::Tensor forward_values(ParamSource& src, const at::Tensor& tokens, const ForwardOptions& opt) const;

 private:
  at::Tensor run_block(ParamSource& src, const std::string& unit, const at::Tensor& x, const ForwardOptions& opt) const;

  ModelArgs args_;
  LoraConfig lora_;
  ValueHeadConfig value_head_;
  bool freeze_base_;
  std::vector<std::string> lora_targets_;                  // canonical names, empty without LoRA
  std::unordered_map<std::string, ParamSpec> spec_index_;  // by FQN (init_rule)
  // RoPE table and causal mask shared by every block (and copies of the model); transformer.h.
  std::shared_ptr<AttentionTables> tables_;
};

}  // namespace wmtp
