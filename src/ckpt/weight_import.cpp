// convert-checkpoint import (see weight_import.h).
#include "ckpt/weight_import.h"

#include <filesystem>
#include <map>
#include <set>

#include "ckpt/flat_range.h"
#include "ckpt/model_file.h"
#include "ckpt/peft.h"
#include "ckpt/weight_source.h"
#include "core/error.h"
#include "core/json.h"
#include "comm/agree.h"
#include "model/mtp.h"

namespace fs = std::filesystem;

namespace wmtp {

std::vector<TensorSpec> base_model_specs(const ModelArgs& args) {
  return tensor_specs_from(MtpModel(args).param_specs());
}

std::string model_args_json_text(const ModelArgs& args) { return json::dump(model_args_to_json(args)); }

ModelArgs model_args_from_text(const std::string& text, const std::string& source) {
  json::Value v;
  try {
    v = json::parse(text);
  } catch (const Error& e) {
    throw_input(source, ": model args: ", e.what());
  }
  return model_args_from_json(v, source);
}

namespace {

// Every expected tensor present with its shape, nothing unexpected.
void check_source(const WeightSource& src, const std::vector<TensorSpec>& specs) {
  std::set<std::string> expected;
  for (const auto& s : specs) {
    expected.insert(s.name);
    if (!src.contains(s.name)) throw_input(src.describe(), ": missing tensor '", s.name, "'");
    auto shape = src.shape(s.name);
    if (shape != s.shape)
      throw_input(src.describe(), ": tensor '", s.name, "' has shape ", shape_to_string(shape),
                  " but the model args need ", shape_to_string(s.shape));
  }
  for (const auto& n : src.names())
    if (!expected.count(n))
      throw_input(src.describe(), ": unexpected tensor '", n, "' (not a parameter of the model the args describe)");
}

void import_model(const ImportOptions& opt, MPI_Comm comm) {
  struct Prepared {
    std::unique_ptr<WeightSource> src;
    ModelArgs args;
    std::vector<TensorSpec> specs;
  };
  auto prep = agreed(comm, [&] {
    auto p = std::make_shared<Prepared>();
    if (opt.from == "meta") {
      std::string params = opt.params_json;
      if (params.empty()) {
        fs::path in(opt.input);
        params = ((fs::is_directory(in) ? in : in.parent_path()) / "params.json").string();
      }
      p->args = model_args_from_params_json(params);
      p->src = open_meta_safetensors(opt.input);
      if (p->args.vocab_size <= 0 && p->src->contains("tok_embeddings.weight"))
        resolve_vocab_size(p->args, p->src->shape("tok_embeddings.weight").at(0));
    } else {
      p->args = read_hf_model_args(opt.input);
      p->src = open_hf_safetensors(opt.input, p->args);
    }
    p->args.n_kv_heads = p->args.kv_heads();
    p->specs = base_model_specs(p->args);
    check_source(*p->src, p->specs);
    return p;
  });
  ModelFileOptions mo;
  mo.dtype = opt.dtype;
  write_model_file(
      opt.output, comm, model_args_json_text(prep->args), prep->specs,
      [&](const std::string& n) { return prep->src->read(n); }, mo);
}

void import_peft(const ImportOptions& opt, MPI_Comm comm) {
  struct Prepared {
    ModelArgs args;
    LoraAdapter adapter;
  };
  auto prep = agreed(comm, [&] {
    auto p = std::make_shared<Prepared>();
    if (!opt.base.empty()) {
      CheckpointReader base(opt.base, MPI_COMM_NULL);
      p->args = model_args_from_text(base.header().model_args_json, opt.base);
      p->adapter = read_peft_adapter(opt.input, p->args);
      // An adapter exported by wmtp names its base's fingerprint: it must be this base.
      const std::string actual = model_fingerprint(base);
      check_lora_base(p->adapter.record, actual, "--base '" + opt.base + "'");
      p->adapter.record.base_path = opt.base;
      p->adapter.record.base_fingerprint = actual;
    } else if (!opt.params_json.empty()) {
      p->args = model_args_from_params_json(opt.params_json);
      p->adapter = read_peft_adapter(opt.input, p->args);
    } else {
      throw_usage("import --from peft needs --base (the base checkpoint) or --params (params.json)");
    }
    return p;
  });
  std::vector<TensorSpec> specs;
  for (const auto& [n, t] : prep->adapter.tensors) specs.push_back({n, t.sizes().vec()});
  ModelFileOptions mo;
  mo.kind = CheckpointKind::Lora;
  mo.dtype = opt.dtype;
  mo.lora = prep->adapter.record;
  write_model_file(
      opt.output, comm, model_args_json_text(prep->args), specs,
      [&](const std::string& n) { return prep->adapter.tensors.at(n); }, mo);
}

}  // namespace

void import_weights(const ImportOptions& opt, MPI_Comm comm) {
  if (opt.input.empty() || opt.output.empty()) throw_usage("import needs --input and --output");
  if (opt.from == "meta" || opt.from == "hf") return import_model(opt, comm);
  if (opt.from == "peft") return import_peft(opt, comm);
  throw_usage("import --from must be meta, hf or peft, got '", opt.from, "'");
}

}  // namespace wmtp
