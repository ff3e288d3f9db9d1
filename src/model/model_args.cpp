// ModelArgs from/to params.json, Meta's FFN sizing, validation and the [model] table resolution.
#include "model/model_args.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json.h"

namespace wmtp {

int64_t ffn_hidden_dim(const ModelArgs& args) {
  // Python: int(2 * (4 * dim) / 3) — a float division truncated toward zero.
  int64_t hidden = static_cast<int64_t>(2.0 * static_cast<double>(4 * args.dim) / 3.0);
  if (args.ffn_dim_multiplier) hidden = static_cast<int64_t>(*args.ffn_dim_multiplier * static_cast<double>(hidden));
  const int64_t m = args.multiple_of;
  return m * ((hidden + m - 1) / m);
}

void validate_model_args(const ModelArgs& a, const std::string& source) {
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) throw_usage(source, ": model field '", key, "' must be positive, got ", v);
  };
  positive("dim", a.dim);
  positive("n_layers", a.n_layers);
  positive("n_heads", a.n_heads);
  positive("multiple_of", a.multiple_of);
  positive("n_future_tokens", a.n_future_tokens);
  positive("max_seq_len", a.max_seq_len);
  if (a.n_kv_heads < 0) throw_usage(source, ": model field 'n_kv_heads' must be positive, got ", a.n_kv_heads);
  if (a.dim % a.n_heads != 0)
    throw_usage(source, ": 'dim' (", a.dim, ") must be divisible by 'n_heads' (", a.n_heads, ")");
  if (a.head_dim() % 2 != 0)
    throw_usage(source, ": head dimension dim/n_heads = ", a.head_dim(), " must be even for RoPE");
  if (a.n_heads % a.kv_heads() != 0)
    throw_usage(source, ": 'n_heads' (", a.n_heads, ") must be a multiple of 'n_kv_heads' (", a.kv_heads(), ")");
  if (a.n_future_tokens > a.n_layers)
    throw_usage(source, ": 'n_future_tokens' (", a.n_future_tokens, ") exceeds 'n_layers' (", a.n_layers,
                "): every head needs its own block");
  if (a.vocab_size == 0 || a.vocab_size < -1)
    throw_usage(source, ": 'vocab_size' must be positive or -1 (unresolved), got ", a.vocab_size);
  if (!(a.norm_eps > 0)) throw_usage(source, ": 'norm_eps' must be positive, got ", a.norm_eps);
  if (!(a.rope_theta > 0)) throw_usage(source, ": 'rope_theta' must be positive, got ", a.rope_theta);
  if (a.ffn_dim_multiplier && !(*a.ffn_dim_multiplier > 0))
    throw_usage(source, ": 'ffn_dim_multiplier' must be positive, got ", *a.ffn_dim_multiplier);
}

namespace {

const json::Value* present(const json::Value& obj, const char* key) {
  const json::Value* v = obj.find(key);
  return (v && !v->is_null()) ? v : nullptr;
}

int64_t read_int(const json::Value& obj, const char* key, const std::string& source, int64_t def, bool required) {
  const json::Value* v = present(obj, key);
  if (!v) {
    if (required) throw_input(source, ": missing required key '", key, "'");
    return def;
  }
  if (v->is_int()) return v->as_int();
  // Some exporters write integral values as 4096.0; accept exactly integral doubles only.
  if (v->is_double()) {
    double d = v->as_double();
    if (std::floor(d) == d && std::abs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  throw_input(source, ": key '", key, "' must be an integer");
}

double read_double(const json::Value& obj, const char* key, const std::string& source, double def) {
  const json::Value* v = present(obj, key);
  if (!v) return def;
  if (!v->is_number()) throw_input(source, ": key '", key, "' must be a number");
  return v->as_double();
}

}  // namespace

ModelArgs model_args_from_json(const json::Value& v, const std::string& source) {
  if (!v.is_object()) throw_input(source, ": expected a JSON object of model arguments");
  ModelArgs a;
  a.dim = read_int(v, "dim", source, a.dim, true);
  a.n_layers = read_int(v, "n_layers", source, a.n_layers, true);
  a.n_heads = read_int(v, "n_heads", source, a.n_heads, true);
  a.n_kv_heads = read_int(v, "n_kv_heads", source, a.n_heads, false);
  a.vocab_size = read_int(v, "vocab_size", source, a.vocab_size, false);
  a.multiple_of = read_int(v, "multiple_of", source, a.multiple_of, false);
  if (present(v, "ffn_dim_multiplier")) a.ffn_dim_multiplier = read_double(v, "ffn_dim_multiplier", source, 0.0);
  a.norm_eps = read_double(v, "norm_eps", source, a.norm_eps);
  a.rope_theta = read_double(v, "rope_theta", source, a.rope_theta);
  a.n_future_tokens = read_int(v, "n_future_tokens", source, a.n_future_tokens, false);
  a.max_seq_len = read_int(v, "max_seq_len", source, a.max_seq_len, false);
  try {
    validate_model_args(a, source);
  } catch (const Error& e) {
    throw Error(ErrorKind::Input, e.what());  // a bad file is an input error, not a usage error
  }
  return a;
}

ModelArgs model_args_from_params_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input(path, ": cannot open model params file");
  std::ostringstream ss;
  ss << in.rdbuf();
  json::Value v;
  try {
    v = json::parse(ss.str());
  } catch (const Error& e) {
    throw_input(path, ": ", e.what());
  }
  return model_args_from_json(v, path);
}

json::Value model_args_to_json(const ModelArgs& a) {
  json::Value v = json::Value::object();
  v.set("dim", json::Value(a.dim));
  v.set("n_layers", json::Value(a.n_layers));
  v.set("n_heads", json::Value(a.n_heads));
  v.set("n_kv_heads", json::Value(a.kv_heads()));
  v.set("vocab_size", json::Value(a.vocab_size));
  v.set("multiple_of", json::Value(a.multiple_of));
  v.set("ffn_dim_multiplier", a.ffn_dim_multiplier ? json::Value(*a.ffn_dim_multiplier) : json::Value());
  v.set("norm_eps", json::Value(a.norm_eps));
  v.set("rope_theta", json::Value(a.rope_theta));
  v.set("n_future_tokens", json::Value(a.n_future_tokens));
  v.set("max_seq_len", json::Value(a.max_seq_len));
  return v;
}

void resolve_vocab_size(ModelArgs& args, int64_t from_tokenizer_or_embedding) {
  if (args.vocab_size > 0) {
    if (from_tokenizer_or_embedding > 0 && from_tokenizer_or_embedding != args.vocab_size)
      throw_input("vocab_size mismatch: model args say ", args.vocab_size, ", tokenizer/embedding has ",
                  from_tokenizer_or_embedding);
    return;
  }
  if (from_tokenizer_or_embedding <= 0)
    throw_input("vocab_size is unresolved: params.json has -1 and no tokenizer or embedding gives it");
  args.vocab_size = from_tokenizer_or_embedding;
}

ModelArgs resolve_model_args(const ModelConfig& c) {
  ModelArgs a;
  std::string source = "[model]";
  if (!c.params_json.empty()) {
    a = model_args_from_params_json(c.params_json);
    source = "[model] (params_json " + c.params_json + ")";
  } else if (c.dim == 0 || c.n_layers == 0 || c.n_heads == 0) {
    throw_usage("[model]: set 'params_json' or the inline fields dim, n_layers and n_heads");
  }
  if (c.dim) a.dim = c.dim;
  if (c.n_layers) a.n_layers = c.n_layers;
  if (c.n_heads) {
    // Plain multi-head attention stays plain when only n_heads is overridden.
    if (a.n_kv_heads == 0 || a.n_kv_heads == a.n_heads) a.n_kv_heads = c.n_heads;
    a.n_heads = c.n_heads;
  }
  if (c.n_kv_heads) a.n_kv_heads = c.n_kv_heads;
  if (c.vocab_size) a.vocab_size = c.vocab_size;
  if (c.multiple_of) a.multiple_of = c.multiple_of;
  if (c.ffn_dim_multiplier != 0.0) a.ffn_dim_multiplier = c.ffn_dim_multiplier;
  if (c.norm_eps != 0.0) a.norm_eps = c.norm_eps;
  if (c.rope_theta != 0.0) a.rope_theta = c.rope_theta;
  if (c.n_future_tokens) a.n_future_tokens = c.n_future_tokens;
  if (c.max_seq_len) a.max_seq_len = c.max_seq_len;
  if (c.loss_chunk_size < 0) throw_usage("[model] loss_chunk_size must be >= 0, got ", c.loss_chunk_size);
  a.n_kv_heads = a.kv_heads();
  validate_model_args(a, source);
  return a;
}

}  // namespace wmtp
