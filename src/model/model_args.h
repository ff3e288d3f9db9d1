// ModelArgs: the architecture of a LLaMA-style MTP model, field for field Meta's params.json
// (docs/model.md), plus ModelConfig, the [model] TOML table that names a
// params.json and/or sets fields inline. Defaults live in one place: the member initializers of
// ModelArgs (Meta's class defaults). ModelConfig's inline fields default to "not set" (0 / empty).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace wmtp {

namespace json {
class Value;
}

struct ModelArgs {
  int64_t dim = 4096;
  int64_t n_layers = 32;  // total blocks: trunk + n_future_tokens heads
  int64_t n_heads = 32;
  int64_t n_kv_heads = 0;   // 0 = same as n_heads (Meta's None); see kv_heads()
  int64_t vocab_size = -1;  // -1 = unresolved: take it from the tokenizer or the embedding
  int64_t multiple_of = 256;
  std::optional<double> ffn_dim_multiplier;  // Meta's None when empty
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t n_future_tokens = 1;
  int64_t max_seq_len = 2048;

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t head_dim() const { return dim / n_heads; }
  // Blocks in `layers` (trunk + head 0) and in `extra_heads` (heads 1..).
  int64_t n_layer_blocks() const { return n_layers - n_future_tokens + 1; }
  int64_t n_trunk_blocks() const { return n_layers - n_future_tokens; }
  int64_t n_extra_heads() const { return n_future_tokens - 1; }
};

// Meta's FFN sizing: hidden = int(2*4*dim/3); with a multiplier hidden = int(mult*hidden); then
// rounded up to a multiple of multiple_of. 11008 for the 7B args.
int64_t ffn_hidden_dim(const ModelArgs& args);

// Structural checks (positive sizes, dim % n_heads, n_heads % kv_heads, even head_dim,
// 1 <= n_future_tokens <= n_layers). Throws Error(Usage) naming `source` and the field.
// Does not require vocab_size to be resolved.
void validate_model_args(const ModelArgs& args, const std::string& source);

// From a parsed params.json object. Unknown keys are ignored; null counts as absent; dim, n_layers
// and n_heads are required; `source` (the file name) is used in error messages (Error(Input)).
ModelArgs model_args_from_json(const json::Value& v, const std::string& source = "params.json");
ModelArgs model_args_from_params_json(const std::string& path);
// All fields; n_kv_heads written resolved; ffn_dim_multiplier written as null when unset.
json::Value model_args_to_json(const ModelArgs& args);

// Fills vocab_size from the tokenizer or the embedding's row count when it is -1; checks they
// agree when both are known. Throws Error(Input) if it stays unresolved (value <= 0).
void resolve_vocab_size(ModelArgs& args, int64_t from_tokenizer_or_embedding);

// [model] table. `params_json` (optional) gives the base; every inline field that is set (non-zero)
// overrides it (or Meta's default when there is no params_json). Compute switches for the MTP step
// live here too because they change how the model runs, not what it is.
struct ModelConfig {
  std::string params_json;  // path to Meta params.json; empty = inline fields only
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;
  int64_t multiple_of = 0;
  double ffn_dim_multiplier = 0.0;
  double norm_eps = 0.0;
  double rope_theta = 0.0;
  int64_t n_future_tokens = 0;
  int64_t max_seq_len = 0;
  bool sequential_unembedding = true;
  bool activation_checkpointing = false;
  int64_t loss_chunk_size = 0;  // positions per CE chunk in the sequential path; 0 = auto (4 per head)

  template <class V>
  void visit(V& v) {
    v.field("params_json", params_json, "Meta params.json (base for the fields below; empty = none)");
    v.field("dim", dim, "model width (0 = from params_json)");
    v.field("n_layers", n_layers, "total blocks: trunk + heads (0 = from params_json)");
    v.field("n_heads", n_heads, "attention heads (0 = from params_json)");
    v.field("n_kv_heads", n_kv_heads, "key/value heads for GQA (0 = from params_json, else n_heads)");
    v.field("vocab_size", vocab_size, "vocabulary (0 = from params_json, else tokenizer/checkpoint)");
    v.field("multiple_of", multiple_of, "FFN hidden size rounded up to this (0 = from params_json, else 256)");
    v.field("ffn_dim_multiplier", ffn_dim_multiplier, "FFN hidden multiplier (0 = from params_json, else none)");
    v.field("norm_eps", norm_eps, "RMSNorm epsilon (0 = from params_json, else 1e-5)");
    v.field("rope_theta", rope_theta, "RoPE base (0 = from params_json, else 10000)");
    v.field("n_future_tokens", n_future_tokens, "MTP heads (0 = from params_json, else 1)");
    v.field("max_seq_len", max_seq_len, "longest sequence (0 = from params_json, else 2048)");
    v.field("sequential_unembedding", sequential_unembedding,
            "compute heads' logits one at a time (O(V) loss memory); false = all heads at once");
    v.field("activation_checkpointing", activation_checkpointing, "recompute each block in backward");
    v.field("loss_chunk_size", loss_chunk_size,
            "positions per CE chunk in the sequential path (0 = auto: 4 chunks per head)");
  }
};

// params_json (if any) overridden by the set inline fields; validated. vocab_size may remain -1.
ModelArgs resolve_model_args(const ModelConfig& cfg);

}  // namespace wmtp
