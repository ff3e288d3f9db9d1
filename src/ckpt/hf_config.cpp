// HF config.json <-> ModelArgs (see hf_config.h).
#include "ckpt/hf_config.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace wmtp {

json::Value read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input(path, ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const Error& e) {
    throw_input(path, ": ", e.what());
  }
}

json::Value hf_config_from_model_args(const ModelArgs& a, const std::string& torch_dtype) {
  json::Value arch = json::Value::array();
  arch.push("LlamaForCausalLM");
  json::Value c = json::Value::object();
  c.set("architectures", std::move(arch));
  c.set("model_type", "llama");
  c.set("hidden_size", a.dim);
  c.set("intermediate_size", ffn_hidden_dim(a));
  c.set("num_hidden_layers", a.n_layer_blocks());
  c.set("num_attention_heads", a.n_heads);
  c.set("num_key_value_heads", a.kv_heads());
  c.set("rms_norm_eps", a.norm_eps);
  c.set("rope_theta", a.rope_theta);
  c.set("vocab_size", a.vocab_size);
  c.set("max_position_embeddings", a.max_seq_len);
  c.set("bos_token_id", 1);
  c.set("eos_token_id", 2);
  c.set("tie_word_embeddings", false);
  c.set("hidden_act", "silu");
  c.set("attention_bias", false);
  c.set("torch_dtype", torch_dtype);
  c.set("wmtp_model_args", model_args_to_json(a));
  return c;
}

ModelArgs model_args_from_hf_config(const json::Value& cfg, const std::string& source, int64_t n_extra_heads) {
  if (!cfg.is_object()) throw_input(source, ": expected a JSON object");
  auto get_int = [&](const char* key) -> int64_t {
    const json::Value* v = cfg.find(key);
    if (!v || !v->is_int()) throw_input(source, ": missing or non-integer '", key, "'");
    return v->as_int();
  };
  if (const json::Value* mt = cfg.find("model_type"); mt && mt->is_string() && mt->as_string() != "llama")
    throw_input(source, ": model_type '", mt->as_string(), "' is not llama");
  ModelArgs a;
  if (const json::Value* exact = cfg.find("wmtp_model_args")) {
    a = model_args_from_json(*exact, source + " (wmtp_model_args)");
    a.n_kv_heads = a.kv_heads();
    if (a.dim != get_int("hidden_size") || a.n_layer_blocks() != get_int("num_hidden_layers") ||
        a.n_extra_heads() != n_extra_heads)
      throw_input(source, ": wmtp_model_args disagree with hidden_size/num_hidden_layers or the ", n_extra_heads,
                  " extra heads found");
    return a;
  }
  a.dim = get_int("hidden_size");
  a.n_heads = get_int("num_attention_heads");
  const json::Value* kv = cfg.find("num_key_value_heads");
  a.n_kv_heads = kv && kv->is_int() ? kv->as_int() : a.n_heads;
  a.n_future_tokens = 1 + n_extra_heads;
  a.n_layers = get_int("num_hidden_layers") + n_extra_heads;
  a.vocab_size = get_int("vocab_size");
  if (const json::Value* v = cfg.find("rms_norm_eps"); v && v->is_number()) a.norm_eps = v->as_double();
  if (const json::Value* v = cfg.find("rope_theta"); v && v->is_number()) a.rope_theta = v->as_double();
  if (const json::Value* v = cfg.find("max_position_embeddings"); v && v->is_int()) a.max_seq_len = v->as_int();
  if (const json::Value* v = cfg.find("rope_scaling"); v && !v->is_null())
    throw_input(source, ": rope_scaling is set; wmtp implements plain RoPE only");
  // Meta sizes the FFN from dim; find a multiple_of that reproduces intermediate_size.
  const int64_t inter = get_int("intermediate_size");
  bool found = false;
  for (int64_t m : {256, 128, 64, 32, 16, 8, 4, 2, 1}) {
    a.multiple_of = m;
    if (ffn_hidden_dim(a) == inter) {
      found = true;
      break;
    }
  }
  if (!found) {
    a.multiple_of = inter;  // rounds any smaller hidden size up to exactly intermediate_size
    if (ffn_hidden_dim(a) != inter)
      throw_input(source, ": intermediate_size ", inter, " cannot be expressed with Meta's FFN sizing for dim ", a.dim);
  }
  try {
    validate_model_args(a, source);
  } catch (const Error& e) {
    throw Error(ErrorKind::Input, e.what());
  }
  return a;
}

}  // namespace wmtp
