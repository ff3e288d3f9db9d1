// convert-checkpoint inspect / verify (see inspect.h).
#include "ckpt/inspect.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <iomanip>
#include <map>
#include <set>

#include "ckpt/checkpoint.h"
#include "ckpt/flat_range.h"
#include "ckpt/peft.h"
#include "ckpt/safetensors.h"
#include "ckpt/weight_export.h"
#include "ckpt/weight_import.h"
#include "core/choice_names.h"
#include "core/error.h"
#include "comm/mpi_util.h"
#include "model/lora.h"

namespace fs = std::filesystem;

namespace wmtp {

namespace {

template <class T>
std::string list_text(const std::vector<T>& v, size_t max_items = 8) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size() && i < max_items; ++i) os << (i ? ", " : "") << +v[i];
  if (v.size() > max_items) os << ", ... (" << v.size() << " values)";
  os << "]";
  return os.str();
}

void print_value(std::ostream& out, const TrainState::Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) out << '"' << x << '"';
        else if constexpr (std::is_arithmetic_v<T>)
          out << std::setprecision(17) << x;
        else if constexpr (std::is_same_v<T, std::vector<uint8_t>>)
          out << "uint8[" << x.size() << "]";
        else
          out << list_text(x);
      },
      v);
}

void inspect_safetensors(const std::string& path, std::ostream& out) {
  SafetensorsModel m(path);
  uint64_t bytes = 0;
  out << "safetensors: " << path << "\n";
  for (const auto& n : m.names()) {
    const StEntry& e = m.entry(n);
    bytes += e.nbytes();
    out << "  " << std::left << std::setw(48) << n << " " << std::setw(16) << shape_to_string(e.shape) << " "
        << st_dtype_name(e.dtype) << "\n";
  }
  out << m.names().size() << " tensors, " << bytes << " bytes\n";
}

}  // namespace

void inspect_weights(const std::string& path, std::ostream& out, bool print_config) {
  std::error_code ec;
  const bool dir = fs::is_directory(path, ec);
  if (dir || (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0))
    return inspect_safetensors(path, out);
  CheckpointReader r(path, MPI_COMM_NULL);
  const CheckpointHeader& in = r.header();
  out << "checkpoint: " << path << "\n"
      << "format:     wmtp-checkpoint v" << in.version << ", kind " << choice_name(kCheckpointKindNames, in.kind)
      << "\n"
      << "written:    " << in.created << " by wmtp " << in.toolkit_version << " on " << in.world_size << " rank"
      << (in.world_size == 1 ? "" : "s") << "\n"
      << "step:       " << in.step;
  if (in.has_optimizer) out << " (optimizer step " << in.optimizer_step << ")";
  out << "\nmodel args: " << in.model_args_json << "\n";
  // What LoRA adapters and frozen-model records compare against (model_fingerprint).
  try {
    out << "fingerprint: " << model_fingerprint(r) << "\n";
  } catch (const Error&) {
    out << "fingerprint: (none: a tensor has no checksum)\n";
  }
  if (auto lora = r.read_lora_record()) {
    std::string targets;
    for (const auto& t : lora->targets) targets += (targets.empty() ? "" : ",") + t;
    out << "lora:       rank " << lora->rank << ", alpha " << lora->alpha << ", dropout " << lora->dropout
        << ", targets " << targets << "\n            base " << (lora->base_path.empty() ? "(unknown)" : lora->base_path)
        << " " << lora->base_fingerprint << "\n";
  }
  for (const char* group : {kModelGroup, kExpAvgGroup, kExpAvgSqGroup}) {
    auto names = r.tensor_names(group);
    if (names.empty()) continue;
    int64_t params = 0;
    for (const auto& n : names) params += shape_numel(r.tensor_shape(group, n));
    out << "/" << group << ": " << names.size() << " tensors, " << params << " elements\n";
    for (const auto& n : names)
      out << "  " << std::left << std::setw(48) << n << " " << std::setw(16)
          << shape_to_string(r.tensor_shape(group, n)) << " " << r.tensor_dtype(group, n) << "\n";
  }
  TrainState st = r.read_train_state();
  if (!st.values().empty()) {
    out << "/train:\n";
    for (const auto& [k, v] : st.values()) {
      out << "  " << k << " = ";
      print_value(out, v);
      out << "\n";
    }
  }
  auto cfg = r.read_config_toml();
  if (cfg && print_config) out << "config:\n" << *cfg << (cfg->empty() || cfg->back() == '\n' ? "" : "\n");
  else if (cfg)
    out << "config:     " << cfg->size() << " bytes of TOML (--config prints it)\n";
}

VerifyReport verify_checkpoint(const std::string& path, MPI_Comm comm) {
  VerifyReport rep;
  // Unverified reads: a checksum mismatch is one of the problems to report, not an error that stops.
  CheckpointReader r(path, comm, {ReadMode::Independent, /*verify=*/false});
  const int rank = comm_rank(comm), size = comm_size(comm);
  auto problem = [&](const auto&... what) { rep.problems.push_back(detail::concat(what...)); };

  // Names and shapes against the model args (metadata: the same verdict on every rank).
  std::map<std::string, std::vector<int64_t>> model;
  for (const auto& n : r.tensor_names(kModelGroup)) model[n] = r.tensor_shape(kModelGroup, n);
  try {
    ModelArgs args = model_args_from_text(r.header().model_args_json, path);
    std::set<std::string> base;
    if (args.vocab_size > 0) {
      for (const auto& s : base_model_specs(args)) {
        base.insert(s.name);
        auto it = model.find(s.name);
        if (r.header().kind == CheckpointKind::Lora) continue;
        if (it == model.end()) problem("missing parameter /model/", s.name);
        else if (it->second != s.shape)
          problem("/model/", s.name, " has shape ", shape_to_string(it->second), ", model args need ",
                  shape_to_string(s.shape));
      }
    }
    auto lora = r.read_lora_record();
    for (const auto& [n, shape] : model) {
      if (base.count(n) || n.rfind("value_head.", 0) == 0) continue;
      if (is_lora_tensor_name(n)) {
        const std::string weight = n.substr(0, n.size() - 7) + ".weight";
        auto w = projection_weight_shape(weight, args);
        const int64_t rk = lora ? lora->rank : (shape.size() == 2 ? (n.back() == 'A' ? shape[0] : shape[1]) : -1);
        std::vector<int64_t> want;
        if (w) want = n.back() == 'A' ? std::vector<int64_t>{rk, (*w)[1]} : std::vector<int64_t>{(*w)[0], rk};
        if (!w) problem("/model/", n, " adapts no projection of this model");
        else if (shape != want)
          problem("/model/", n, " has shape ", shape_to_string(shape), ", expected ", shape_to_string(want));
        if (!lora) problem("/model/", n, " is a LoRA adapter but the file has no /lora group");
        continue;
      }
      if (!base.empty()) problem("unexpected tensor /model/", n);
    }
  } catch (const Error& e) {
    problem("model args: ", e.what());
  }
  for (const char* g : {kExpAvgGroup, kExpAvgSqGroup})
    for (const auto& n : r.tensor_names(g)) {
      auto it = model.find(n);
      if (it == model.end()) problem("/", g, "/", n, " has no parameter in /model");
      else if (r.tensor_shape(g, n) != it->second)
        problem("/", g, "/", n, " shape differs from /model/", n);
    }

  // Values: finite, checksums. Each rank reads an equal share of every tensor.
  std::vector<std::string> names;
  std::vector<uint64_t> nonfinite;
  for (const char* g : {kModelGroup, kExpAvgGroup, kExpAvgSqGroup}) {
    for (const auto& n : r.tensor_names(g)) {
      const auto shape = r.tensor_shape(g, n);
      const int64_t numel = shape_numel(shape), per = (numel + size - 1) / size;
      const int64_t b = std::min(numel, per * rank), e = std::min(numel, b + per);
      std::vector<TensorPiece> pieces;
      if (e > b) pieces.push_back({n, b, at::empty({e - b})});
      r.read_tensors(g, {{n, shape}}, pieces);
      nonfinite.push_back(pieces.empty() ? 0 : uint64_t((~at::isfinite(pieces[0].data)).sum().item<int64_t>()));
      names.push_back(std::string(g) + "/" + n);
      rep.elements += numel;
    }
  }
  all_sum_u64(comm, nonfinite.data(), int(nonfinite.size()));
  for (size_t i = 0; i < names.size(); ++i)
    if (nonfinite[i]) problem("/", names[i], " has ", nonfinite[i], " non-finite values");
  for (const auto& n : r.verify_checksums().mismatched) problem("/", n, ": checksum mismatch (data corrupted)");
  rep.tensors = int64_t(names.size());
  return rep;
}

}  // namespace wmtp
