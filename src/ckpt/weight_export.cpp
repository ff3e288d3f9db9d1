// convert-checkpoint export (see weight_export.h).
#include "ckpt/weight_export.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/hf_config.h"
#include "ckpt/peft.h"
#include "ckpt/safetensors.h"
#include "ckpt/value_head_export.h"
#include "ckpt/weight_import.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/json.h"
#include "model/lora.h"
#include "model/names.h"

namespace fs = std::filesystem;

namespace wmtp {


namespace {


bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

OutputCleanup::OutputCleanup(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  created_ = !fs::exists(dir_, ec);
  fs::create_directories(dir_, ec);
}

OutputCleanup::~OutputCleanup() {
  if (finished_) return;
  for (const auto& f : files_) std::remove(f.c_str());
  std::error_code ec;
  if (created_) fs::remove(dir_, ec);  // only if empty: never what another writer put there
}

std::vector<std::string> OutputCleanup::done() {
  finished_ = true;
  return files_;
}

void require_no_model_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  if (!fs::is_directory(dir, ec)) throw_usage("output '", dir, "' exists and is not a directory");
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (ends_with(n, ".safetensors") || ends_with(n, ".safetensors.index.json") || n == "params.json" ||
        n == "config.json" || n == kPeftConfigFile)
      found.push_back(n);
  }
  if (found.empty()) return;
  // The small files first (an index, a config): they say best what is there.
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    const bool sa = ends_with(a, ".safetensors"), sb = ends_with(b, ".safetensors");
    return sa != sb ? sb : a < b;
  });
  std::string list;
  for (size_t i = 0; i < found.size() && i < 4; ++i) list += (i ? ", " : "") + found[i];
  if (found.size() > 4) list += ", ...";
  throw_usage("output directory '", dir, "' already holds model files (", list,
              "): a reader would mix them with the new ones (a stale shard index makes it load the old "
              "weights). Write to an empty or new directory, or remove them first");
}

void require_finite(const at::Tensor& t, const std::string& name, const std::string& context) {
  const int64_t bad = (~at::isfinite(t)).sum().item<int64_t>();
  if (bad > 0)
    throw_input("tensor '", name, "' has ", bad, " NaN or infinite value(s) out of ", t.numel(), " (", context,
                "): refusing to write weights that cannot be used");
}

std::vector<std::string> write_model_safetensors(const std::string& dir, const std::string& format,
                                                 const ModelArgs& args, const std::vector<TensorSpec>& specs,
                                                 const std::function<at::Tensor(const std::string&)>& fetch,
                                                 StoreDtype dtype, uint64_t max_shard_bytes) {
  if (format != "meta" && format != "hf") throw_usage("export: format must be meta, hf or peft, got '", format, "'");
  const bool hf = format == "hf";
  // Output name -> Meta name, for the main files and the sidecar.
  std::vector<StTensorSpec> main, side;
  std::map<std::string, std::string> to_meta;
  for (const auto& s : specs) {
    if (is_lora_tensor_name(s.name))
      throw_usage("export: '", s.name, "' is a LoRA adapter: merge it first (merge-lora) or export with --format peft");
    std::string out = s.name;
    bool sidecar = false;
    if (hf) {
      if (auto h = meta_to_hf_name(s.name)) out = *h;
      else if (auto sc = meta_to_sidecar_name(s.name))
        out = *sc, sidecar = true;
      else
        sidecar = true;  // value head etc.: kept under its Meta name beside the HF model
    }
    (sidecar ? side : main).push_back({out, st_dtype_of(dtype), s.shape});
    to_meta[out] = s.name;
  }
  require_no_model_files(dir);
  auto convert = [&](const std::string& out) {
    const std::string& meta = to_meta.at(out);
    at::Tensor t = fetch(meta).to(at::kFloat);
    require_finite(t, meta, "writing " + dir);
    if (hf)
      if (int64_t heads = rotary_permutation_heads(meta, args)) t = permute_rotary_meta_to_hf(t, heads);
    return t.to(scalar_type_of(st_dtype_of(dtype))).contiguous();
  };
  OutputCleanup cleanup(dir);
  for (const auto& f : write_safetensors_model(dir, main, convert, max_shard_bytes))
    cleanup.add((fs::path(dir) / f).string());
  if (!side.empty()) {
    const std::string p = (fs::path(dir) / kMtpSidecarFile).string();
    write_safetensors(p, side, convert);
    cleanup.add(p);
  }
  const std::string meta_file = (fs::path(dir) / (hf ? "config.json" : "params.json")).string();
  write_file_atomically(meta_file, json::dump(hf ? hf_config_from_model_args(args, torch_dtype_name(dtype))
                                                 : model_args_to_json(args)) +
                                       "\n");
  cleanup.add(meta_file);
  return cleanup.done();
}

std::vector<std::string> export_weights(const ExportOptions& opt) {
  if (opt.input.empty() || opt.output.empty()) throw_usage("export needs --input and --output");
  CheckpointReader r(opt.input, MPI_COMM_NULL);
  const ModelArgs args = model_args_from_text(r.header().model_args_json, opt.input);
  std::vector<TensorSpec> specs;
  for (const auto& n : r.tensor_names(kModelGroup)) specs.push_back({n, r.tensor_shape(kModelGroup, n)});
  if (opt.format == "peft") {
    auto info = r.read_lora_record();
    if (!info) throw_input(opt.input, ": no /lora group (not a checkpoint of a LoRA run)");
    LoraAdapter a;
    a.record = *info;
    for (const auto& s : specs)
      if (is_lora_tensor_name(s.name)) a.tensors[s.name] = r.read_tensor(kModelGroup, s.name);
    if (a.tensors.empty()) throw_input(opt.input, ": no LoRA tensors in /model");
    // The directory will name its base (base_model_name_or_path): it must still be that base.
    if (!a.record.base_path.empty() && is_valid_checkpoint_file(a.record.base_path))
      check_lora_base(a.record, CheckpointReader(a.record.base_path, MPI_COMM_NULL));
    for (const auto& [n, t] : a.tensors) require_finite(t, n, "exporting " + opt.input);
    require_no_model_files(opt.output);
    OutputCleanup cleanup(opt.output);
    write_peft_adapter(opt.output, a, args, opt.dtype);
    cleanup.add((fs::path(opt.output) / kPeftConfigFile).string());
    cleanup.add((fs::path(opt.output) / kPeftWeightsFile).string());
    if (fs::exists(fs::path(opt.output) / kPeftMtpHeadsFile))
      cleanup.add((fs::path(opt.output) / kPeftMtpHeadsFile).string());
    for (const auto& f : export_value_head(r, opt.output, opt.dtype)) cleanup.add(f);  // a critic's head
    return cleanup.done();
  }
  // A critic's value head goes to its own files beside the backbone (value_head_export.h).
  std::vector<TensorSpec> value_head;
  for (const auto& s : specs)
    if (is_value_head_tensor_name(s.name)) value_head.push_back(s);
  if (!value_head.empty())
    specs.erase(std::remove_if(specs.begin(), specs.end(),
                               [](const TensorSpec& s) { return is_value_head_tensor_name(s.name); }),
                specs.end());
  // Model order (layers in sequence) reads better in shards than alphabetical order.
  std::vector<TensorSpec> ordered;
  std::map<std::string, std::vector<int64_t>> in_file;
  for (const auto& s : specs) in_file[s.name] = s.shape;
  if (r.header().kind != CheckpointKind::Lora) {
    for (const auto& s : base_model_specs(args))
      if (in_file.count(s.name)) ordered.push_back({s.name, in_file[s.name]}), in_file.erase(s.name);
  }
  for (const auto& s : specs)
    if (in_file.count(s.name)) ordered.push_back(s);
  OutputCleanup cleanup(opt.output);  // the backbone's files go if the value head's fail
  for (const auto& f : write_model_safetensors(
           opt.output, opt.format, args, ordered, [&](const std::string& n) { return r.read_tensor(kModelGroup, n); },
           opt.dtype, opt.max_shard_bytes))
    cleanup.add(f);
  if (!value_head.empty())
    for (const auto& f : export_value_head(r, opt.output, opt.dtype)) cleanup.add(f);
  return cleanup.done();
}

}  // namespace wmtp
