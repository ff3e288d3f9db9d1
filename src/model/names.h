// Parameter names across ecosystems (docs/checkpoint-format.md, "Names"): Meta FQNs (our canonical names, the
// HDF5 dataset names) <-> Hugging Face LlamaForCausalLM names, the sidecar names of the MTP extra
// heads, and the rotary permutation of q/k rows that converting between the two layouts needs.
//
//   Meta                                   HF
//   tok_embeddings.weight                  model.embed_tokens.weight
//   layers.{i}.attention.wq|wk|wv|wo.*     model.layers.{i}.self_attn.q_proj|k_proj|v_proj|o_proj.*
//   layers.{i}.feed_forward.w1|w2|w3.*     model.layers.{i}.mlp.gate_proj|down_proj|up_proj.*
//   layers.{i}.attention_norm.weight       model.layers.{i}.input_layernorm.weight
//   layers.{i}.ffn_norm.weight             model.layers.{i}.post_attention_layernorm.weight
//   norm.weight / output.weight            model.norm.weight / lm_head.weight
//   extra_heads.{j}.<block>.*              (no HF name) sidecar: mtp_heads.{j}.<HF block name>.*
// Leaves after the module (".weight", ".lora_A", ".lora_B") are kept as they are.
// Meta's RoPE rotates interleaved pairs (2k, 2k+1), HF's rotate_half pairs (k, k + head_dim/2): the
// rows of wq (n_heads) and wk (n_kv_heads — GQA) are permuted within each head; so are lora_B rows.
#pragma once
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

namespace wmtp {

struct ModelArgs;

// One row of the per-block table: Meta module path inside a block <-> HF module path.
struct BlockModuleName {
  const char* meta;  // "attention.wq"
  const char* hf;    // "self_attn.q_proj"
};
const std::vector<BlockModuleName>& block_module_names();
// LoRA target short names: "wq" <-> "q_proj", "w1" <-> "gate_proj", ... (nullopt if unknown).
std::optional<std::string> meta_target_to_hf(const std::string& target);
std::optional<std::string> hf_target_to_meta(const std::string& target);

// Full names. meta_to_hf: nullopt for names HF has no place for (extra_heads.*, value_head.*,
// rope.freqs). hf_to_meta: nullopt for names that are not LLaMA parameters we know.
std::optional<std::string> meta_to_hf_name(const std::string& meta);
std::optional<std::string> hf_to_meta_name(const std::string& hf);
// Sidecar names of the MTP extra heads (extra_heads.{j}.* <-> mtp_heads.{j}.<HF block name>).
std::optional<std::string> meta_to_sidecar_name(const std::string& meta);
std::optional<std::string> sidecar_to_meta_name(const std::string& sidecar);
// Tensors that converters drop silently: Meta "rope.freqs", HF "*.rotary_emb.inv_freq".
bool is_ignored_meta_name(const std::string& meta);
bool is_ignored_hf_name(const std::string& hf);

// Heads to permute for a Meta FQN: n_heads for "<block>.attention.wq.{weight,lora_B}", kv heads for
// wk, 0 for everything else (no permutation).
int64_t rotary_permutation_heads(const std::string& meta, const ModelArgs& args);
// Row permutation of a [n_heads * head_dim, cols] tensor (head_dim even). Inverse of each other.
at::Tensor permute_rotary_meta_to_hf(const at::Tensor& w, int64_t n_heads);
at::Tensor permute_rotary_hf_to_meta(const at::Tensor& w, int64_t n_heads);

}  // namespace wmtp
