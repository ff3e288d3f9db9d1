// Building, initialising and loading the models of a run (train/run_models.h).
#include "train/run_models.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <optional>

#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "core/json.h"
#include "model/mtp.h"
#include "shard/sharded_model.h"
#include "train/train_checkpoint.h"

namespace wmtp {

ModelSpec model_spec_from_checkpoint(const std::string& role, const std::string& path) {
  if (path.empty()) throw_usage(role, " model: no checkpoint given");
  CheckpointReader r(path, MPI_COMM_NULL);
  ModelSpec spec;
  spec.role = role;
  spec.args = model_args_from_json(json::parse(r.info().model_args_json), path);
  if (std::optional<LoraInfo> lora = r.read_lora_info()) {
    spec.lora.enabled = true;
    spec.lora.rank = lora->rank;
    spec.lora.alpha = lora->alpha;
    spec.lora.dropout = lora->dropout;
    spec.lora.targets = lora->targets;
  }
  // A critic: its value head from /value_head, or — a merged critic (merge-lora keeps the tensors,
  // not the attributes) — its type from the tensor names (dropout and bias_init do not matter to a
  // frozen model).
  if (std::optional<ValueHeadInfo> vh = r.read_value_head_info()) {
    if (vh->hidden != spec.args.dim)
      throw_input_agreed(path, ": /value_head hidden ", vh->hidden, " does not match the model dim ", spec.args.dim);
    spec.value_head.enabled = true;
    spec.value_head.type = vh->type;
    spec.value_head.dropout = vh->dropout;
    spec.value_head.bias_init = vh->bias_init;
  } else if (r.has_tensor(kModelGroup, "value_head.mlp.0.weight") || r.has_tensor(kModelGroup, "value_head.linear.weight")) {
    spec.value_head.enabled = true;
    spec.value_head.type = r.has_tensor(kModelGroup, "value_head.linear.weight") ? "linear" : "mlp";
  }
  spec.frozen = true;
  spec.weights = path;
  return spec;
}

ModelHandle build_model(const ModelSpec& spec, Communicator& comm, const ShardingConfig& sharding, uint64_t seed,
                        c10::Device device) {
  ModelHandle m;
  m.spec = spec;
  m.model = std::make_unique<MtpModel>(spec.args, spec.lora, spec.value_head, spec.freeze_base);
  std::vector<ParamSpec> specs = m.model->param_specs();
  if (spec.frozen)
    for (auto& s : specs) s.trainable = false;
  m.engine = std::make_unique<ShardedModel>(specs, comm, sharding, device);
  // Each rank generates only the elements it holds (counter-based init): the whole model never exists.
  const MtpModel& model = *m.model;
  m.engine->init_shards([&](const std::string& fqn, int64_t offset, const at::Tensor& out) {
    model.init_range(fqn, offset, out, seed);
  });
  // The trunk's backward starts with its last block right after the heads: keep it gathered.
  if (!spec.frozen && spec.args.n_trunk_blocks() > 0)
    m.engine->set_reshard_after_forward("layers." + std::to_string(spec.args.n_trunk_blocks() - 1), false);
  return m;
}

void load_model_weights(ModelHandle& m, MPI_Comm comm) {
  const std::string& path = m.spec.weights;
  if (path.empty()) return;
  std::string kind;
  std::optional<LoraInfo> lora;
  {
    CheckpointReader r(path, comm);
    kind = r.info().kind;
    lora = r.read_lora_info();
  }
  // A frozen model must come whole from its files: load it as a resume loads (every tensor the
  // model has must be present), without optimizer state. The trained model's initial weights may
  // lack adapters and a value head, which then keep their seeded init.
  const LoadPurpose whole = m.spec.frozen ? LoadPurpose::Resume : LoadPurpose::InitialWeights;
  if (kind == "lora") {
    if (!lora || lora->base_path.empty())
      throw_input_agreed(path, ": adapters-only checkpoint of the ", m.spec.role,
                         " model records no base weights to apply them to");
    load_training_checkpoint(lora->base_path, comm, *m.model, *m.engine, nullptr, LoadPurpose::InitialWeights);
    load_training_checkpoint(path, comm, *m.model, *m.engine, nullptr, LoadPurpose::Resume);
  } else {
    load_training_checkpoint(path, comm, *m.model, *m.engine, nullptr, whole);
  }
}

std::string describe_model(const ModelHandle& m) {
  const ModelArgs& a = m.spec.args;
  const auto& plan = m.engine->plan();
  auto millions = [](int64_t n) { return double(n) / 1e6; };
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s: dim %lld, %lld layers (%lld trunk + %lld heads), vocab %lld; %.2fM trainable / %.2fM frozen params%s%s%s",
                m.spec.role.c_str(), (long long)a.dim, (long long)a.n_layers, (long long)a.n_trunk_blocks(),
                (long long)a.n_future_tokens, (long long)a.vocab_size, millions(plan.trainable_numel()),
                millions(plan.frozen_numel()), m.spec.lora.enabled ? " (LoRA)" : "",
                m.spec.value_head.enabled ? " + value head" : "", m.spec.frozen ? " [frozen]" : "");
  std::string s = buf;
  if (!m.spec.weights.empty()) s += "; weights " + m.spec.weights;
  return s;
}

}  // namespace wmtp
