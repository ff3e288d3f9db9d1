// MtpModel: parameter specs, deterministic init and the functional forward over a ParamSource.
#include "model/mtp.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "core/error.h"
#include "model/activation_checkpoint.h"
#include "model/param_init.h"
#include "model/transformer.h"

namespace wmtp {

namespace {
constexpr double kInitStd = 0.02;
}  // namespace

MtpModel::MtpModel(ModelArgs args, LoraConfig lora, ValueHeadConfig value_head, bool freeze_base)
    : args_(std::move(args)), lora_(std::move(lora)), value_head_(std::move(value_head)), freeze_base_(freeze_base) {
  validate_model_args(args_, "model");
  if (args_.vocab_size <= 0) throw_usage("model: vocab_size is unresolved (", args_.vocab_size, ")");
  if (lora_.enabled) lora_targets_ = lora_target_names(lora_);
  if (value_head_.enabled) {
    value_head_specs(args_.dim, value_head_);  // validates the config
    if (args_.n_future_tokens != 1)
      throw_usage("model: a value head needs n_future_tokens = 1, got ", args_.n_future_tokens,
                  " (an MTP checkpoint's trunk + head 0 is the n_future = 1 model with n_layers = trunk + 1)");
  }
  for (ParamSpec& s : param_specs()) spec_index_.emplace(s.fqn, std::move(s));
  tables_ = std::make_shared<AttentionTables>(args_.head_dim(), args_.rope_theta);
}

std::string MtpModel::head_unit(int64_t head) const {
  WMTP_CHECK(head >= 0 && head < args_.n_future_tokens, "head ", head, " out of range");
  if (head == 0) return "layers." + std::to_string(args_.n_trunk_blocks());
  return "extra_heads." + std::to_string(head - 1);
}

std::vector<std::string> MtpModel::unit_names() const {
  std::vector<std::string> units = {"tok_embeddings"};
  for (int64_t i = 0; i < args_.n_layer_blocks(); ++i) units.push_back("layers." + std::to_string(i));
  for (int64_t j = 0; j < args_.n_extra_heads(); ++j) units.push_back("extra_heads." + std::to_string(j));
  units.push_back("norm");
  if (value_head_.enabled) {
    units.push_back("value_head");
  } else {
    units.push_back("output");
  }
  return units;
}

std::vector<ParamSpec> MtpModel::param_specs() const {
  const int64_t D = args_.dim, V = args_.vocab_size, E = args_.head_dim();
  const int64_t HE = args_.n_heads * E, GE = args_.kv_heads() * E, F = ffn_hidden_dim(args_);
  const bool base_trainable = !lora_.enabled && !freeze_base_;
  std::vector<ParamSpec> specs;
  specs.push_back({"tok_embeddings.weight", "tok_embeddings", {V, D}, base_trainable});

  struct Proj {
    const char* stem;
    const char* name;
    int64_t out, in;
  };
  const Proj projs[] = {{"attention.wq", "wq", HE, D},   {"attention.wk", "wk", GE, D},
                        {"attention.wv", "wv", GE, D},   {"attention.wo", "wo", D, HE},
                        {"feed_forward.w1", "w1", F, D}, {"feed_forward.w2", "w2", D, F},
                        {"feed_forward.w3", "w3", F, D}};
  auto add_block = [&](const std::string& unit) {
    for (const auto& p : projs) {
      const std::string stem = unit + "." + p.stem;
      specs.push_back({stem + ".weight", unit, {p.out, p.in}, base_trainable});
      if (std::find(lora_targets_.begin(), lora_targets_.end(), p.name) != lora_targets_.end()) {
        specs.push_back({stem + ".lora_A", unit, {lora_.rank, p.in}, true});
        specs.push_back({stem + ".lora_B", unit, {p.out, lora_.rank}, true});
      }
    }
    specs.push_back({unit + ".attention_norm.weight", unit, {D}, base_trainable});
    specs.push_back({unit + ".ffn_norm.weight", unit, {D}, base_trainable});
  };
  for (int64_t i = 0; i < args_.n_layer_blocks(); ++i) add_block("layers." + std::to_string(i));
  for (int64_t j = 0; j < args_.n_extra_heads(); ++j) add_block("extra_heads." + std::to_string(j));
  specs.push_back({"norm.weight", "norm", {D}, base_trainable});
  if (value_head_.enabled) {
    for (auto& s : value_head_specs(D, value_head_)) specs.push_back(std::move(s));
  } else {
    specs.push_back({"output.weight", "output", {V, D}, base_trainable});
  }
  return specs;
}

InitRule MtpModel::init_rule(const std::string& fqn) const {
  auto it = spec_index_.find(fqn);
  if (it == spec_index_.end()) throw_usage("model: no parameter '", fqn, "'");
  const ParamSpec* spec = &it->second;
  if (spec->unit == "value_head") return value_head_init_rule(fqn, args_.dim, value_head_);
  if (is_lora_tensor_name(fqn))
    return fqn.back() == 'A' ? InitRule::kaiming_uniform_sqrt5(spec->shape.back()) : InitRule::constant(0.0);
  if (spec->shape.size() == 1) return InitRule::constant(1.0);  // RMSNorm weights
  return InitRule::normal(kInitStd);
}

void MtpModel::init_range(const std::string& fqn, int64_t offset, const at::Tensor& out, uint64_t seed) const {
  fill_init_range(out, init_rule(fqn), seed, fqn, offset);
}

std::unordered_map<std::string, at::Tensor> MtpModel::init_params(uint64_t seed) const {
  std::unordered_map<std::string, at::Tensor> out;
  for (const auto& s : param_specs()) out[s.fqn] = init_tensor(s.shape, init_rule(s.fqn), seed, s.fqn);
  return out;
}

// ---- forward ----

at::Tensor MtpModel::run_block(ParamSource& src, const std::string& unit, const at::Tensor& x,
                               const ForwardOptions& opt) const {
  // Captured by value: under checkpointing this runs again inside backward.
  const ModelArgs* args = &args_;
  const double scaling = lora_.enabled ? lora_.scaling() : 0.0;
  const double lora_dropout = lora_.enabled ? lora_.dropout : 0.0;
  const bool training = opt.training;
  ParamSource* source = &src;
  std::shared_ptr<AttentionTables> tables = tables_;
  UnitFn fn = [args, scaling, lora_dropout, training, source, unit, tables](const at::Tensor& in) {
    RopeTable rope = tables->rope(in.size(1), in.device());
    BlockContext ctx{args,  scaling,  lora_dropout,
                     &rope, training, kFusedAttention ? at::Tensor() : tables->causal_mask(in.size(1), in.device()),
                     {}};
    UnitParams p = source->begin_unit(unit);
    at::Tensor out = block_forward(p, unit, in, ctx);
    source->end_unit(unit, out);
    return out;
  };
  if (!opt.activation_checkpointing) return fn(x);
  return run_checkpointed(fn, x, /*preserve_rng=*/training && lora_dropout > 0.0);
}

at::Tensor MtpModel::forward_trunk(ParamSource& src, const at::Tensor& tokens, const ForwardOptions& opt) const {
  if (tokens.dim() != 2 || tokens.scalar_type() != at::kLong)
    throw_usage("model: tokens must be an int64 [B, S] tensor, got ", tokens.sizes(), " ", tokens.scalar_type());
  if (tokens.size(1) > args_.max_seq_len)
    throw_usage("model: sequence length ", tokens.size(1), " exceeds max_seq_len ", args_.max_seq_len);
  UnitParams emb = src.begin_unit("tok_embeddings");
  at::Tensor h = embed_tokens(emb.at("tok_embeddings.weight"), tokens);
  src.end_unit("tok_embeddings", h);
  for (int64_t i = 0; i < args_.n_trunk_blocks(); ++i) h = run_block(src, "layers." + std::to_string(i), h, opt);
  return h;
}

at::Tensor MtpModel::forward_head_block(ParamSource& src, int64_t head, const at::Tensor& z,
                                        const ForwardOptions& opt) const {
  return run_block(src, head_unit(head), z, opt);
}

at::Tensor MtpModel::forward_norm(ParamSource& src, const at::Tensor& h) const {
  UnitParams p = src.begin_unit("norm");
  at::Tensor out = rms_norm(h, p.at("norm.weight"), args_.norm_eps);
  src.end_unit("norm", out);
  return out;
}

at::Tensor MtpModel::forward_output(ParamSource& src, const at::Tensor& h) const {
  if (value_head_.enabled) throw_usage("model: a value model has no output projection (no logits)");
  at::Tensor normed = forward_norm(src, h);
  UnitParams p = src.begin_unit("output");
  at::Tensor logits = at::linear(normed, p.at("output.weight"));
  src.end_unit("output", logits);
  return logits;
}

at::Tensor MtpModel::forward_logits(ParamSource& src, const at::Tensor& tokens, const ForwardOptions& opt,
                                    bool all_heads) const {
  at::Tensor z = forward_trunk(src, tokens, opt);
  const int64_t K = all_heads ? args_.n_future_tokens : 1;
  std::vector<at::Tensor> hs;
  for (int64_t k = 0; k < K; ++k) hs.push_back(forward_head_block(src, k, z, opt));
  return forward_output(src, at::stack(hs, 2));  // [B, S, K, V]
}

at::Tensor MtpModel::forward_hidden(ParamSource& src, const at::Tensor& tokens, const ForwardOptions& opt) const {
  return forward_norm(src, forward_head_block(src, 0, forward_trunk(src, tokens, opt), opt));
}

at::Tensor MtpModel::forward_values(ParamSource& src, const at::Tensor& tokens, const ForwardOptions& opt) const {
  if (!value_head_.enabled) throw_usage("model: forward_values needs a value head ([value_head] enabled = true)");
  at::Tensor h = forward_hidden(src, tokens, opt);
  UnitParams p = src.begin_unit("value_head");
  at::Tensor v = value_head_forward(p, h, value_head_, opt.training);
  src.end_unit("value_head", v);
  return v;
}

}  // namespace wmtp
