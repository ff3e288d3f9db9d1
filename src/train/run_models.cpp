// Building, initializing and loading the models of a run (train/run_models.h).
#include "train/run_models.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <optional>

#include "ckpt/checkpoint.h"
#include "ckpt/checksum.h"
#include "ckpt/tokenizer_record.h"
#include "ckpt/train_keys.h"
#include "core/error.h"
#include "core/json.h"
#include "data/dataset.h"
#include "model/mtp.h"
#include "shard/sharded_model.h"
#include "train/train_checkpoint.h"

namespace wmtp {

ModelSpec model_spec_from_checkpoint(const std::string& role, const std::string& path) {
  if (path.empty()) throw_usage(role, " model: no checkpoint given");
  CheckpointReader r(path, MPI_COMM_NULL);
  ModelSpec spec;
  spec.role = role;
  spec.args = model_args_from_json(json::parse(r.header().model_args_json), path);
  if (std::optional<LoraRecord> lora = r.read_lora_record()) spec.lora = lora_config_of(*lora);
  // A critic: its value head from /value_head, or — a merged critic (merge-lora keeps the tensors,
  // not the attributes) — its type from the tensor names (dropout and bias_init do not matter to a
  // frozen model).
  if (std::optional<ValueHeadRecord> vh = r.read_value_head_record()) {
    if (vh->hidden != spec.args.dim)
      throw_input(path, ": /value_head hidden ", vh->hidden, " does not match the model dim ", spec.args.dim);
    spec.value_head.enabled = true;
    spec.value_head.type = vh->type;
    spec.value_head.dropout = vh->dropout;
    spec.value_head.bias_init = vh->bias_init;
  } else if (r.has_tensor(kModelGroup, "value_head.mlp.0.weight") ||
             r.has_tensor(kModelGroup, "value_head.linear.weight")) {
    spec.value_head.enabled = true;
    spec.value_head.type = r.has_tensor(kModelGroup, "value_head.linear.weight") ? ValueHeadType::Linear
                                                                                 : ValueHeadType::Mlp;
  }
  spec.frozen = true;
  spec.weights = path;
  return spec;
}

ModelHandle build_model(const ModelSpec& spec, Communicator& comm, const ShardingConfig& sharding, uint64_t seed,
                        c10::Device device, const ShardGroups* groups) {
  ModelHandle m;
  m.spec = spec;
  m.model = std::make_unique<MtpModel>(spec.args, spec.lora, spec.value_head, spec.freeze_base);
  std::vector<ParamSpec> specs = m.model->param_specs();
  if (spec.frozen)
    for (auto& s : specs) s.trainable = false;
  m.engine = std::make_unique<ShardedModel>(specs, comm, sharding, device, groups);
  // Each rank generates only the elements it holds (counter-based init): the whole model never exists.
  const MtpModel& model = *m.model;
  m.engine->init_shards(
      [&](const std::string& fqn, int64_t offset, const at::Tensor& out) { model.init_range(fqn, offset, out, seed); });
  // The trunk's backward starts with its last block right after the heads: keep it gathered.
  if (!spec.frozen && spec.args.n_trunk_blocks() > 0)
    m.engine->set_reshard_after_forward("layers." + std::to_string(spec.args.n_trunk_blocks() - 1), false);
  return m;
}

namespace {

// Two fingerprints as one: an adapters-only file and the base it is applied to.
std::string combined_fingerprint(const std::string& adapters, const std::string& base) {
  return "fnv1a64:" + hex64(fnv1a64(adapters + " on " + base));
}

}  // namespace

std::string weights_fingerprint(const std::string& path, MPI_Comm comm) {
  CheckpointReader r(path, comm);
  const std::string fp = model_fingerprint(r);
  if (r.header().kind != CheckpointKind::Lora) return fp;
  const std::optional<LoraRecord> lora = r.read_lora_record();
  if (!lora || lora->base_path.empty()) return fp;
  return combined_fingerprint(fp, model_fingerprint(CheckpointReader(lora->base_path, comm)));
}

void load_model_weights(ModelHandle& m, MPI_Comm comm) {
  const std::string& path = m.spec.weights;
  if (path.empty()) return;
  const CheckpointReader file(path, comm);
  m.fingerprint = model_fingerprint(file);
  if (file.header().kind != CheckpointKind::Lora) {
    // A frozen model must come whole from its file. The trained model's initial weights may lack
    // adapters and a value head, which then keep their seeded init.
    load_model_tensors(file, *m.model, *m.engine,
                       m.spec.frozen ? LoadPurpose::FrozenWeights : LoadPurpose::InitialWeights);
    return;
  }
  const std::optional<LoraRecord> lora = file.read_lora_record();
  if (!lora || lora->base_path.empty())
    throw_input_identical(path, ": adapters-only checkpoint of the ", m.spec.role,
                          " model records no base weights to apply them to");
  // The adapters only mean something on the base they were trained on: a file put in its place
  // (same shapes, other weights) would be used silently.
  const CheckpointReader base(lora->base_path, comm);
  const std::string base_fp = model_fingerprint(base);
  check_lora_base(*lora, base_fp,
                  "'" + lora->base_path + "' (the base the " + m.spec.role + " checkpoint '" + path +
                      "' records, as it is now)");
  m.fingerprint = combined_fingerprint(m.fingerprint, base_fp);
  load_model_tensors(base, *m.model, *m.engine, LoadPurpose::InitialWeights);
  load_model_tensors(file, *m.model, *m.engine,
                     m.spec.frozen ? LoadPurpose::FrozenWeights : LoadPurpose::InitialAdapters);
}

void record_frozen_models(TrainState& st, const std::vector<ModelHandle>& frozen) {
  for (const ModelHandle& f : frozen) {
    const std::string key = train_keys::kFrozenPrefix + f.spec.role;
    st.set_string(key + train_keys::kFrozenWeights, f.spec.weights);
    st.set_string(key + train_keys::kFrozenFingerprint, f.fingerprint);
  }
}

std::vector<std::string> check_frozen_models(const TrainState& st, const std::vector<ModelHandle>& frozen,
                                             const std::string& checkpoint) {
  std::vector<std::string> notes;
  for (const ModelHandle& f : frozen) {
    const std::string key = train_keys::kFrozenPrefix + f.spec.role;
    const std::string& name = f.spec.weights_key.empty() ? f.spec.role : f.spec.weights_key;
    if (!st.has(key + train_keys::kFrozenFingerprint)) {
      notes.push_back(checkpoint + " records no " + f.spec.role + " (saved by an older wmtp): the " + f.spec.role +
                      " it was trained against cannot be checked; resuming with " + f.spec.weights);
      continue;
    }
    const std::string was = st.get_string(key + train_keys::kFrozenWeights),
                      was_fp = st.get_string(key + train_keys::kFrozenFingerprint);
    if (was_fp == f.fingerprint) continue;
    const std::string what = "the run was trained against " + name + " = " + was + " (fingerprint " + was_fp +
                             ") but " + name + " now gives " + f.spec.weights + " (fingerprint " + f.fingerprint + ")";
    if (!f.spec.allow_other_weights)
      throw_input_identical("cannot resume from ", checkpoint, ": ", what,
                            was == f.spec.weights ? " (the file changed)" : "",
                            "; resuming would train the rest of the run against another model. Set ", name, " = ", was,
                            " to resume as the run started, or --set ", f.spec.override_key,
                            "=true to go on with the new one");
    notes.push_back("resuming with another " + f.spec.role + " (" + f.spec.override_key + " = true): " + what);
  }
  return notes;
}

std::string check_frozen_tokenizer(const std::string& key, const std::string& checkpoint,
                                   const std::string& data_train) {
  const DatasetHeader data = Dataset::open(data_train).header();
  return check_checkpoint_tokenizer(key, checkpoint, data.tokenizer_fingerprint,
                                    "the tokenizer of [data] train " + data_train + ": " + data.tokenizer_path);
}

std::string describe_model(const ModelHandle& m) {
  const ModelArgs& a = m.spec.args;
  const auto& plan = m.engine->plan();
  auto millions = [](int64_t n) { return double(n) / 1e6; };
  char buf[320];
  std::snprintf(
      buf, sizeof buf,
      "%s: dim %lld, %lld layers (%lld trunk + %lld heads), vocab %lld; %.2fM trainable / %.2fM frozen params%s%s%s",
      m.spec.role.c_str(), (long long)a.dim, (long long)a.n_layers, (long long)a.n_trunk_blocks(),
      (long long)a.n_future_tokens, (long long)a.vocab_size, millions(plan.trainable_numel()),
      millions(plan.frozen_numel()), m.spec.lora.enabled ? " (LoRA)" : "",
      m.spec.value_head.enabled ? " + value head" : "", m.spec.frozen ? " [frozen]" : "");
  std::string s = buf;
  if (!m.spec.weights.empty()) s += "; weights " + m.spec.weights;
  return s;
}

}  // namespace wmtp
