// Meta <-> HF name maps and the q/k rotary permutation (see names.h).
#include "model/names.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "model/model_args.h"

namespace wmtp {

const std::vector<BlockModuleName>& block_module_names() {
  static const std::vector<BlockModuleName> table = {
      {"attention.wq", "self_attn.q_proj"},     {"attention.wk", "self_attn.k_proj"},
      {"attention.wv", "self_attn.v_proj"},     {"attention.wo", "self_attn.o_proj"},
      {"feed_forward.w1", "mlp.gate_proj"},     {"feed_forward.w2", "mlp.down_proj"},
      {"feed_forward.w3", "mlp.up_proj"},       {"attention_norm", "input_layernorm"},
      {"ffn_norm", "post_attention_layernorm"},
  };
  return table;
}

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// "<prefix><digits>.<rest>" -> (index, rest); nullopt if `s` does not have that form.
std::optional<std::pair<std::string, std::string>> split_indexed(const std::string& s, const std::string& prefix) {
  if (!starts_with(s, prefix)) return std::nullopt;
  size_t dot = s.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return std::nullopt;
  std::string idx = s.substr(prefix.size(), dot - prefix.size());
  for (char c : idx)
    if (c < '0' || c > '9') return std::nullopt;
  return std::make_pair(idx, s.substr(dot + 1));
}

// Maps a block-relative name "<module>.<leaf>" through the table (meta -> hf when `to_hf`).
std::optional<std::string> map_block(const std::string& rest, bool to_hf) {
  for (const auto& row : block_module_names()) {
    const std::string from = to_hf ? row.meta : row.hf, to = to_hf ? row.hf : row.meta;
    if (starts_with(rest, from + ".")) {
      std::string leaf = rest.substr(from.size() + 1);
      if (leaf == "weight" || leaf == "lora_A" || leaf == "lora_B") return to + "." + leaf;
    }
  }
  return std::nullopt;
}

const std::pair<const char*, const char*> kTargets[] = {{"wq", "q_proj"}, {"wk", "k_proj"},    {"wv", "v_proj"},
                                                        {"wo", "o_proj"}, {"w1", "gate_proj"}, {"w2", "down_proj"},
                                                        {"w3", "up_proj"}};

}  // namespace

std::optional<std::string> meta_target_to_hf(const std::string& target) {
  for (auto [m, h] : kTargets)
    if (target == m) return std::string(h);
  return std::nullopt;
}

std::optional<std::string> hf_target_to_meta(const std::string& target) {
  for (auto [m, h] : kTargets)
    if (target == h) return std::string(m);
  return std::nullopt;
}

std::optional<std::string> meta_to_hf_name(const std::string& meta) {
  if (meta == "tok_embeddings.weight") return "model.embed_tokens.weight";
  if (meta == "norm.weight") return "model.norm.weight";
  if (meta == "output.weight") return "lm_head.weight";
  if (auto p = split_indexed(meta, "layers."))
    if (auto b = map_block(p->second, true)) return "model.layers." + p->first + "." + *b;
  return std::nullopt;
}

std::optional<std::string> hf_to_meta_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "tok_embeddings.weight";
  if (hf == "model.norm.weight") return "norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  if (auto p = split_indexed(hf, "model.layers."))
    if (auto b = map_block(p->second, false)) return "layers." + p->first + "." + *b;
  return std::nullopt;
}

std::optional<std::string> meta_to_sidecar_name(const std::string& meta) {
  if (auto p = split_indexed(meta, "extra_heads."))
    if (auto b = map_block(p->second, true)) return "mtp_heads." + p->first + "." + *b;
  return std::nullopt;
}

std::optional<std::string> sidecar_to_meta_name(const std::string& sidecar) {
  if (auto p = split_indexed(sidecar, "mtp_heads."))
    if (auto b = map_block(p->second, false)) return "extra_heads." + p->first + "." + *b;
  return std::nullopt;
}

bool is_ignored_meta_name(const std::string& meta) { return meta == "rope.freqs"; }

bool is_ignored_hf_name(const std::string& hf) {
  const std::string suffix = ".rotary_emb.inv_freq";
  return hf.size() > suffix.size() && hf.compare(hf.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t rotary_permutation_heads(const std::string& meta, const ModelArgs& args) {
  auto p = split_indexed(meta, "layers.");
  if (!p) p = split_indexed(meta, "extra_heads.");
  if (!p) return 0;
  const std::string& rest = p->second;
  if (rest == "attention.wq.weight" || rest == "attention.wq.lora_B") return args.n_heads;
  if (rest == "attention.wk.weight" || rest == "attention.wk.lora_B") return args.kv_heads();
  return 0;
}

namespace {
void check_rotary_shape(const at::Tensor& w, int64_t n_heads) {
  if (w.dim() != 2 || n_heads <= 0 || w.size(0) % n_heads != 0 || (w.size(0) / n_heads) % 2 != 0)
    throw_input("rotary permutation: a [", w.dim() > 0 ? w.size(0) : 0, ", ...] tensor cannot be split into ", n_heads,
                " heads of even size");
}
}  // namespace

at::Tensor permute_rotary_meta_to_hf(const at::Tensor& w, int64_t n_heads) {
  check_rotary_shape(w, n_heads);
  const int64_t rows = w.size(0), cols = w.size(1), half = rows / n_heads / 2;
  return w.reshape({n_heads, half, 2, cols}).transpose(1, 2).reshape({rows, cols}).contiguous();
}

at::Tensor permute_rotary_hf_to_meta(const at::Tensor& w, int64_t n_heads) {
  check_rotary_shape(w, n_heads);
  const int64_t rows = w.size(0), cols = w.size(1), half = rows / n_heads / 2;
  return w.reshape({n_heads, 2, half, cols}).transpose(1, 2).reshape({rows, cols}).contiguous();
}

}  // namespace wmtp
