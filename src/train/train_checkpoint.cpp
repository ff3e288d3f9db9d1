// Saving and restoring a training run through ckpt/ (format) and shard/ (who owns which elements).
#include "train/train_checkpoint.h"

#include <ATen/ATen.h>

#include <set>

#include "core/error.h"
#include "core/json.h"
#include "model/mtp.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"
#include "train/pipeline.h"

namespace wmtp {

namespace {

bool is_adapter_or_head(const std::string& fqn) { return is_lora_tensor_name(fqn) || fqn.rfind("value_head.", 0) == 0; }

std::vector<TensorSpec> trained_specs(const MtpModel& model) {
  std::vector<TensorSpec> out;
  for (const ParamSpec& s : model.param_specs())
    if (s.trainable) out.push_back({s.fqn, s.shape});
  return out;
}

// Whether a file may lack the model's tensor `s` when loaded for `purpose` (LoadPurpose), and if
// not, what the error says it is needed for.
bool may_lack(LoadPurpose purpose, const ParamSpec& s, bool adapters_only) {
  switch (purpose) {
    case LoadPurpose::InitialWeights: return is_adapter_or_head(s.fqn);
    // An adapters-only file holds what its model trains (s.trainable: the adapters, a value head),
    // whether the model loaded from it is trained or frozen; the rest comes from the base.
    case LoadPurpose::FrozenWeights:
    case LoadPurpose::InitialAdapters:
    case LoadPurpose::Resume: return adapters_only && !s.trainable;
  }
  return false;
}

const char* needed_for(LoadPurpose purpose) {
  switch (purpose) {
    case LoadPurpose::InitialWeights: return " (initial weights must hold every base weight)";
    case LoadPurpose::InitialAdapters: return " (initial adapters must hold every trained tensor)";
    case LoadPurpose::FrozenWeights: return " (a frozen model must come whole from its file, its adapters included)";
    case LoadPurpose::Resume: return " (needed to resume this run)";
  }
  return "";
}

// The model's tensors `file` holds, in the model's order, checked against the model's shapes; one
// it lacks must be allowed for `purpose`. Reads no tensor data. Every rank sees the same file, so
// these errors are raised identically everywhere.
std::vector<TensorSpec> tensors_to_load(const CheckpointReader& file, const MtpModel& model, LoadPurpose purpose) {
  const bool adapters_only = file.header().kind == CheckpointKind::Lora;
  std::vector<TensorSpec> out;
  for (const ParamSpec& s : model.param_specs()) {
    if (file.has_tensor(kModelGroup, s.fqn)) {
      out.push_back({s.fqn, s.shape});
      continue;
    }
    if (!may_lack(purpose, s, adapters_only))
      throw_input_identical(file.header().path, ": checkpoint has no tensor /", kModelGroup, "/", s.fqn,
                            needed_for(purpose));
  }
  file.check_tensors(kModelGroup, out);
  return out;
}

// Reads `specs` of /model into the engine. Trained tensors go straight into the engine's fp32
// masters; frozen ones into buffers of this rank's ranges, handed to the engine only once the whole
// group has verified — so a damaged file leaves the frozen weights as they were, and the trained
// ones, which every training checkpoint holds, are overwritten whole by the next one read.
void read_model_tensors(const CheckpointReader& file, ShardedModel& engine, const std::vector<TensorSpec>& specs) {
  std::set<std::string> present;
  for (const TensorSpec& s : specs) present.insert(s.name);
  std::vector<TensorPiece> all;
  for (const auto& p : engine.trainable_pieces())
    if (present.count(p.name)) all.push_back(p);
  const size_t n_trainable = all.size();
  for (const auto& p : engine.frozen_pieces())
    if (present.count(p.name)) all.push_back({p.name, p.offset, at::empty({p.data.numel()}, at::kFloat)});
  file.read_tensors(kModelGroup, specs, all);
  engine.sync_replicas();
  engine.load_pieces(std::vector<TensorPiece>(all.begin() + ptrdiff_t(n_trainable), all.end()));
  engine.invalidate_gathered();
}

const char* group_of(AdamState which) { return which == AdamState::ExpAvg ? kExpAvgGroup : kExpAvgSqGroup; }

}  // namespace

CheckpointHeader TrainedModelState::header(int64_t step) const {
  CheckpointHeader h;
  h.kind = adapters_only_ ? CheckpointKind::Lora : CheckpointKind::Full;
  h.model_args_json = json::dump(model_args_to_json(m_.model->args()));
  h.step = step;
  return h;
}

void TrainedModelState::write_tensors(CheckpointWriter& w) const {
  const MtpModel& model = *m_.model;
  std::vector<ParamSpec> specs;
  for (const ParamSpec& s : model.param_specs())
    if (!adapters_only_ || s.trainable) specs.push_back(s);
  std::vector<TensorPiece> pieces = m_.engine->trainable_pieces();
  if (!adapters_only_) {
    std::vector<TensorPiece> frozen = m_.engine->frozen_pieces();
    pieces.insert(pieces.end(), frozen.begin(), frozen.end());
  }
  w.write_tensors(kModelGroup, tensor_specs_from(specs), pieces);
  if (lora_) w.write_lora_record(*lora_);
  if (model.value_head().enabled) {  // a value model records its head, to be rebuilt from the file alone
    const ValueHeadConfig& vh = model.value_head();
    w.write_value_head_record({vh.type, model.args().dim, vh.dropout, vh.bias_init});
  }
}

std::vector<std::string> TrainedModelState::check_state(const TrainState&, const CheckpointReader& file) const {
  if (lora_ && !lora_->base_fingerprint.empty())
    if (const std::optional<LoraRecord> saved = file.read_lora_record())
      check_lora_base(*saved, lora_->base_fingerprint,
                      "this run's base '" + lora_->base_path + "' ([training] init_weights, resuming " +
                          file.header().path + ")");
  tensors_to_load(file, *m_.model, LoadPurpose::Resume);
  return {};
}

void TrainedModelState::load_state(const TrainState&, const CheckpointReader& file) {
  read_model_tensors(file, *m_.engine, tensors_to_load(file, *m_.model, LoadPurpose::Resume));
}

void OptimizerState::write_tensors(CheckpointWriter& w) const {
  if (!save_) return;
  const std::vector<TensorSpec> trained = trained_specs(model_);
  for (AdamState which : {AdamState::ExpAvg, AdamState::ExpAvgSq})
    w.write_tensors(group_of(which), trained, opt_.state_pieces(which));
  w.write_optimizer_step(opt_.step_count());
}

std::vector<std::string> OptimizerState::check_state(const TrainState&, const CheckpointReader& file) const {
  if (!file.header().has_optimizer) return {};
  const std::vector<TensorSpec> trained = trained_specs(model_);
  for (AdamState which : {AdamState::ExpAvg, AdamState::ExpAvgSq}) file.check_tensors(group_of(which), trained);
  return {};
}

void OptimizerState::load_state(const TrainState&, const CheckpointReader& file) {
  const CheckpointHeader& info = file.header();
  const std::vector<TensorSpec> trained = trained_specs(model_);
  for (AdamState which : {AdamState::ExpAvg, AdamState::ExpAvgSq}) {
    std::vector<TensorPiece> pieces = opt_.state_pieces(which);
    if (info.has_optimizer) {
      file.read_tensors(group_of(which), trained, pieces);
    } else {  // fresh moments, also after a damaged file that held some
      for (TensorPiece& p : pieces) p.data.zero_();
    }
  }
  opt_.sync_state_replicas();
  opt_.set_step_count(info.has_optimizer ? info.optimizer_step : 0);
}

std::string save_training_checkpoint(CheckpointDir& dir, int64_t keep_last, MPI_Comm comm,
                                     const CheckpointHeader& header, const std::vector<const Checkpointed*>& parts,
                                     const std::string& config_toml) {
  const std::string tmp = dir.begin_save(header.step);
  {
    CheckpointWriter w(tmp, comm, header);
    TrainState st;
    for (const Checkpointed* part : parts) part->save_state(st);
    for (const Checkpointed* part : parts) part->write_tensors(w);
    if (!st.values().empty()) w.write_train_state(st);
    if (!config_toml.empty()) w.write_config_toml(config_toml);
    w.close();
  }
  return dir.commit(header.step, keep_last);
}

Resumed resume_training(const CheckpointConfig& cfg, MPI_Comm comm, const std::vector<Checkpointed*>& parts) {
  Resumed out;
  ResumeAttempt attempt;
  attempt.check = [&](const CheckpointReader& file, const TrainState& st) {
    out.notes.clear();  // a file tried before this one may have left some
    for (const Checkpointed* part : parts)
      for (std::string& note : part->check_state(st, file)) out.notes.push_back(std::move(note));
  };
  attempt.load = [&](const CheckpointReader& file, const TrainState& st) {
    for (Checkpointed* part : parts) part->load_state(st, file);
  };
  out.path = resume_checkpoint(cfg, comm, attempt);
  return out;
}

void load_model_tensors(const CheckpointReader& file, const MtpModel& model, ShardedModel& engine,
                        LoadPurpose purpose) {
  read_model_tensors(file, engine, tensors_to_load(file, model, purpose));
}

}  // namespace wmtp
