// merge-lora (see lora_merge.h).
#include "ckpt/lora_merge.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>

#include "ckpt/checksum.h"
#include "ckpt/flat_range.h"
#include "ckpt/model_file.h"
#include "ckpt/peft.h"
#include "ckpt/tokenizer_record.h"
#include "ckpt/train_keys.h"
#include "ckpt/weight_export.h"
#include "ckpt/weight_import.h"
#include "ckpt/weight_source.h"
#include "core/error.h"
#include "comm/agree.h"
#include "model/lora.h"

namespace fs = std::filesystem;

namespace wmtp {

namespace {

std::string detect_base_format(const MergeOptions& opt) {
  if (opt.base_format != "auto") return opt.base_format;
  std::error_code ec;
  if (fs::is_directory(opt.base, ec)) return fs::exists(fs::path(opt.base) / "config.json") ? "hf" : "meta";
  if (opt.base.size() > 12 && opt.base.compare(opt.base.size() - 12, 12, ".safetensors") == 0) return "meta";
  return "h5";
}

struct Inputs {
  ModelArgs args;      // the base's
  ModelArgs out_args;  // the merged model's: the base's, or those of a critic whose adapters are merged
  std::optional<ValueHeadRecord> value_head;  // the merged model is a critic (its value head's attributes)
  bool critic_adapters = false;               // --lora is a critic on that base: the output is the critic's model
  std::string tokenizer_fingerprint;          // of the data the adapters were trained on ("" if not recorded)
  std::unique_ptr<WeightSource> base;
  std::string base_fingerprint;  // "" when it cannot be known cheaply (computed on demand)
  LoraAdapter adapter;
  std::map<std::string, at::Tensor> extra;  // trained non-adapter tensors of the adapter file
};

// Fingerprint of a safetensors base, as an fp32 import of it would have: checksums of fp32 data.
// Collective: the ranks share the reads (agreed), then sum.
std::string source_fingerprint(const WeightSource& src, const ModelArgs& args, MPI_Comm comm) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  std::vector<TensorSpec> specs;
  const auto names = src.names();
  for (const auto& n : names) specs.push_back({n, src.shape(n)});
  std::vector<uint64_t> sums = agreed(comm, [&] {
    std::vector<uint64_t> mine(names.size(), 0);
    for (size_t i = 0; i < names.size(); ++i)
      if (int(i % size_t(size)) == rank) mine[i] = tensor_checksum(src.read(names[i]).contiguous(), 0);
    return mine;
  });
  all_sum_u64(comm, sums.data(), int(sums.size()));
  return model_fingerprint(model_args_json_text(args), specs, sums);
}

Inputs open_inputs(const MergeOptions& opt) {
  Inputs in;
  const std::string fmt = detect_base_format(opt);
  if (fmt == "h5") {
    CheckpointReader r(opt.base, MPI_COMM_NULL);
    in.args = model_args_from_text(r.header().model_args_json, opt.base);
    in.base_fingerprint = model_fingerprint(r);
    in.base = open_checkpoint_weights(opt.base);
  } else if (fmt == "meta") {
    std::string params = opt.params_json;
    if (params.empty()) {
      fs::path b(opt.base);
      params = ((fs::is_directory(b) ? b : b.parent_path()) / "params.json").string();
    }
    in.args = model_args_from_params_json(params);
    in.base = open_meta_safetensors(opt.base);
    if (in.args.vocab_size <= 0 && in.base->contains("tok_embeddings.weight"))
      resolve_vocab_size(in.args, in.base->shape("tok_embeddings.weight").at(0));
  } else if (fmt == "hf") {
    in.args = read_hf_model_args(opt.base);
    in.base = open_hf_safetensors(opt.base, in.args);
  } else {
    throw_usage("--base-format must be auto, h5, meta or hf, got '", opt.base_format, "'");
  }
  in.args.n_kv_heads = in.args.kv_heads();
  in.out_args = in.args;

  const std::string lora_path = opt.lora.empty() ? opt.base : opt.lora;
  std::error_code ec;
  if (fs::is_directory(lora_path, ec)) {
    in.adapter = read_peft_adapter(lora_path, in.args);
  } else {
    if (opt.lora.empty() && fmt != "h5")
      throw_usage("merge-lora needs --lora unless the base is a wmtp checkpoint with adapters");
    CheckpointReader r(lora_path, MPI_COMM_NULL);
    auto info = r.read_lora_record();
    if (!info) throw_input(lora_path, ": no /lora group (not a checkpoint of a LoRA run)");
    in.adapter.record = *info;
    in.value_head = r.read_value_head_record();
    const TrainState st = r.read_train_state();
    if (st.has(train_keys::kDataTokenizerFingerprint))
      in.tokenizer_fingerprint = st.get_string(train_keys::kDataTokenizerFingerprint);
    // A critic trained with LoRA on an MTP model reads that model's trunk + head 0 (its own args:
    // n_future_tokens = 1): merged, it must be that value model, not the base's MTP shape.
    in.critic_adapters = !opt.lora.empty() && in.value_head.has_value();
    if (in.critic_adapters) in.out_args = model_args_from_text(r.header().model_args_json, lora_path);
    for (const auto& n : r.tensor_names(kModelGroup)) {
      if (is_lora_tensor_name(n)) in.adapter.tensors[n] = r.read_tensor(kModelGroup, n);
      else if (!opt.lora.empty() && !in.base->contains(n))
        in.extra[n] = r.read_tensor(kModelGroup, n);
    }
    if (in.adapter.tensors.empty()) throw_input(lora_path, ": no LoRA tensors in /model");
  }
  if (in.adapter.record.rank <= 0) throw_input(lora_path, ": LoRA rank ", in.adapter.record.rank, " is not positive");
  if (fmt == "h5" && !in.value_head && opt.lora.empty())  // a critic's own full checkpoint as the base
    in.value_head = CheckpointReader(opt.base, MPI_COMM_NULL).read_value_head_record();
  // Every adapter needs its base weight with matching shapes (checked again by the merge itself).
  for (const auto& [n, t] : in.adapter.tensors) {
    const std::string w = n.substr(0, n.size() - 7) + ".weight";
    if (!in.base->contains(w)) throw_input(opt.base, ": no base weight '", w, "' for adapter '", n, "'");
  }
  return in;
}

}  // namespace

int64_t merge_lora_weights(const MergeOptions& opt, MPI_Comm comm) {
  if (opt.base.empty() || opt.output.empty()) throw_usage("merge-lora needs --base and --output");
  // Inputs are opened by every rank (headers and the small adapters); errors are agreed.
  auto in = agreed(comm, [&] { return std::make_shared<Inputs>(open_inputs(opt)); });
  // Adapters from another file (a LoRA checkpoint, or a PEFT directory wmtp exported) name the
  // fingerprint of the base they were trained on: this base must have it.
  if (!opt.lora.empty() && !in->adapter.record.base_fingerprint.empty() && !opt.ignore_fingerprint) {
    const std::string actual = !in->base_fingerprint.empty() ? in->base_fingerprint
                                                             : source_fingerprint(*in->base, in->args, comm);
    try {
      check_lora_base(in->adapter.record, actual, "--base '" + opt.base + "'");
    } catch (const Error& e) {
      throw Error(e.kind(), std::string(e.what()) + "; pass --ignore-fingerprint to merge anyway", e.reach());
    }
  }
  const double scaling = in->adapter.scaling();

  // Output tensors: the base's (minus adapters it may hold) plus trained extras, in model order. A
  // critic's adapters make the critic: the base tensors its model has (no output layer, no extra
  // heads), which must be there with its shapes, and its value head.
  std::vector<TensorSpec> specs;
  std::set<std::string> seen;
  for (const auto& s : base_model_specs(in->out_args)) {
    if (in->critic_adapters && s.name == "output.weight") continue;
    if (in->base->contains(s.name)) {
      if (in->critic_adapters && in->base->shape(s.name) != s.shape)
        throw_input_identical("the critic --lora '", opt.lora, "' needs '", s.name, "' of shape ",
                              shape_to_string(s.shape), " but --base '", opt.base, "' has ",
                              shape_to_string(in->base->shape(s.name)), ": not its backbone");
      specs.push_back({s.name, in->base->shape(s.name)}), seen.insert(s.name);
    } else if (in->critic_adapters) {
      throw_input_identical("the critic --lora '", opt.lora, "' needs '", s.name, "', which --base '", opt.base,
                            "' does not have: not its backbone");
    }
  }
  if (!in->critic_adapters)
    for (const auto& n : in->base->names())
      if (!seen.count(n) && !is_lora_tensor_name(n) && !in->extra.count(n)) specs.push_back({n, in->base->shape(n)});
  for (const auto& [n, t] : in->extra) specs.push_back({n, t.sizes().vec()});
  int64_t merged = 0;
  for (const auto& [n, t] : in->adapter.tensors) merged += n.back() == 'A';

  auto fetch = [&](const std::string& name) -> at::Tensor {
    if (auto it = in->extra.find(name); it != in->extra.end()) return it->second;
    at::Tensor w = in->base->read(name);
    const std::string stem = name.size() > 7 ? name.substr(0, name.size() - 7) : "";
    auto a = in->adapter.tensors.find(stem + ".lora_A");
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 && a != in->adapter.tensors.end()) {
      std::unordered_map<std::string, at::Tensor> p = {{name, w},
                                                       {stem + ".lora_A", a->second},
                                                       {stem + ".lora_B", in->adapter.tensors.at(stem + ".lora_B")}};
      merge_lora(p, scaling);  // fp32 arithmetic, result in w's dtype (fp32 here)
      return p.at(name);
    }
    return w;
  };

  std::string fmt = opt.output_format;
  if (fmt == "auto") {
    const std::string& o = opt.output;
    fmt = o.size() > 3 && o.compare(o.size() - 3, 3, ".h5") == 0 ? "h5" : "meta";
  }
  const StoreDtype dtype = parse_store_dtype(opt.dtype);
  if (fmt == "h5") {
    ModelFileOptions mo;
    mo.dtype = dtype;
    mo.value_head = in->value_head;  // a merged critic is rebuilt from the file alone
    // Which tokenizer the merged model reads: what train-verifiable and train-rho1 check a frozen model by.
    if (!in->tokenizer_fingerprint.empty())
      mo.train_state.set_string(train_keys::kDataTokenizerFingerprint, in->tokenizer_fingerprint);
    write_model_file(opt.output, comm, model_args_json_text(in->out_args), specs, fetch, mo);
  } else if (fmt == "meta" || fmt == "hf") {
    on_rank0(comm,
             [&] { write_model_safetensors(opt.output, fmt, in->out_args, specs, fetch, dtype, opt.max_shard_bytes); });
  } else {
    throw_usage("--output-format must be auto, h5, meta or hf, got '", opt.output_format, "'");
  }
  return merged;
}

}  // namespace wmtp
