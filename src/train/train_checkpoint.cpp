// Saving and restoring a training run through ckpt/ (format) and shard/ (who owns which elements).
#include "train/train_checkpoint.h"

#include <ATen/ATen.h>

#include <set>
#include <unordered_map>

#include "core/error.h"
#include "core/json.h"
#include "model/mtp.h"
#include "shard/sharded_adamw.h"
#include "shard/sharded_model.h"

namespace wmtp {

namespace {

std::vector<ParamSpec> select_specs(const std::vector<ParamSpec>& specs, bool trainable_only) {
  std::vector<ParamSpec> out;
  for (const auto& s : specs)
    if (!trainable_only || s.trainable) out.push_back(s);
  return out;
}

bool is_adapter_or_head(const std::string& fqn) {
  return fqn.find(".lora_A") != std::string::npos || fqn.find(".lora_B") != std::string::npos ||
         fqn.rfind("value_head.", 0) == 0;
}

}  // namespace

std::string save_training_checkpoint(CheckpointDir& dir, int64_t keep_last, MPI_Comm comm, const MtpModel& model,
                                     ShardedModel& engine, ShardedAdamW* opt, const SaveRequest& req) {
  const std::string tmp = dir.begin_save(req.step);
  {
    CheckpointHeader header;
    header.kind = req.adapters_only ? "lora" : "full";
    header.model_args_json = json::dump(model_args_to_json(model.args()));
    header.step = req.step;
    CheckpointWriter w(tmp, comm, header);

    const auto all_specs = model.param_specs();
    const auto model_specs = select_specs(all_specs, req.adapters_only);
    std::vector<TensorPiece> pieces = engine.trainable_pieces();
    if (!req.adapters_only) {
      auto frozen = engine.frozen_pieces();
      pieces.insert(pieces.end(), frozen.begin(), frozen.end());
    }
    w.write_tensors(kModelGroup, tensor_specs_from(model_specs), pieces);

    if (req.with_optimizer && opt) {
      const auto trained = tensor_specs_from(select_specs(all_specs, true));
      w.write_tensors(kExpAvgGroup, trained, opt->state_pieces(AdamState::ExpAvg));
      w.write_tensors(kExpAvgSqGroup, trained, opt->state_pieces(AdamState::ExpAvgSq));
      w.write_optimizer_step(opt->step_count());
    }
    if (req.state) w.write_train_state(*req.state);
    if (!req.config_toml.empty()) w.write_config_toml(req.config_toml);
    if (req.lora) w.write_lora_info(*req.lora);
    if (model.value_head().enabled) {  // a value model records its head, to be rebuilt from the file alone
      const ValueHeadConfig& vh = model.value_head();
      w.write_value_head_info({vh.type, model.args().dim, vh.dropout, vh.bias_init});
    }
    w.close();
  }
  return dir.commit(req.step, keep_last);
}

TrainState load_training_checkpoint(const std::string& path, MPI_Comm comm, const MtpModel& model,
                                    ShardedModel& engine, ShardedAdamW* opt, LoadPurpose purpose,
                                    const LoraInfo* lora) {
  CheckpointReader r(path, comm);
  const CheckpointInfo& info = r.info();
  const auto specs = model.param_specs();
  if (lora && !lora->base_fingerprint.empty())
    if (const std::optional<LoraInfo> saved = r.read_lora_info())
      check_lora_base(*saved, lora->base_fingerprint,
                      "this run's base '" + lora->base_path + "' ([training] init_weights, resuming " + path + ")");

  // Which of our tensors the file has; a missing one must be allowed for this purpose. Every rank
  // sees the same file, so these errors are raised identically everywhere.
  std::set<std::string> present;
  for (const auto& s : specs) {
    if (r.has_tensor(kModelGroup, s.fqn)) {
      present.insert(s.fqn);
      continue;
    }
    bool ok = purpose == LoadPurpose::InitialWeights ? is_adapter_or_head(s.fqn)
                                                      : (!s.trainable && info.kind == "lora");
    if (!ok)
      throw_input_identical(path, ": checkpoint has no tensor /", kModelGroup, "/", s.fqn,
                            purpose == LoadPurpose::InitialWeights ? " (initial weights must hold every base weight)"
                                                                : " (needed to resume this run)");
  }
  std::vector<TensorSpec> read_specs;
  for (const auto& s : specs)
    if (present.count(s.fqn)) read_specs.push_back({s.fqn, s.shape});

  // Trained tensors: read straight into the engine's fp32 masters.
  std::vector<TensorPiece> all;
  for (const auto& p : engine.trainable_pieces())
    if (present.count(p.name)) all.push_back(p);
  const size_t n_trainable = all.size();
  // Frozen tensors: read into fp32 buffers of this rank's ranges, then handed to the engine.
  for (const auto& p : engine.frozen_pieces())
    if (present.count(p.name)) all.push_back({p.name, p.offset, at::empty({p.data.numel()}, at::kFloat)});
  r.read_tensors(kModelGroup, read_specs, all);
  engine.sync_replicas();
  engine.load_pieces(std::vector<TensorPiece>(all.begin() + n_trainable, all.end()));
  engine.invalidate_gathered();

  if (purpose == LoadPurpose::Resume && opt && info.has_optimizer) {
    std::vector<TensorSpec> trained;
    for (const auto& s : specs)
      if (s.trainable) trained.push_back({s.fqn, s.shape});
    for (AdamState which : {AdamState::ExpAvg, AdamState::ExpAvgSq}) {
      auto pieces = opt->state_pieces(which);
      r.read_tensors(which == AdamState::ExpAvg ? kExpAvgGroup : kExpAvgSqGroup, trained, pieces);
    }
    opt->sync_state_replicas();
    opt->set_step_count(info.optimizer_step);
  }
  return r.read_train_state();
}

}  // namespace wmtp
