// Round-robin collective writing of model-only checkpoints (see model_file.h).
#include "ckpt/model_file.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>

#include "ckpt/flat_range.h"
#include "ckpt/weight_export.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "comm/agree.h"

namespace wmtp {

void write_model_file(const std::string& path, MPI_Comm comm, const std::string& model_args_json,
                      const std::vector<TensorSpec>& specs, const std::function<at::Tensor(const std::string&)>& fetch,
                      const ModelFileOptions& options) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  const std::string tmp = path + ".tmp";
  try {
    CheckpointWriter w(tmp, comm, {options.kind, model_args_json, 0});
    // Rounds of `size` tensors: in round k rank r writes tensor k*size + r whole.
    for (size_t first = 0; first < specs.size(); first += size_t(size)) {
      const size_t last = std::min(specs.size(), first + size_t(size));
      std::vector<TensorSpec> round(specs.begin() + first, specs.begin() + last);
      std::vector<TensorPiece> mine;
      const size_t idx = first + size_t(rank);
      // A failed read on one rank becomes the same error on all, before the collective write.
      agreed(comm, [&] {
        if (idx >= last) return;
        at::Tensor t = fetch(specs[idx].name);
        require_finite(t, specs[idx].name, "writing " + path);
        if (t.sizes().vec() != specs[idx].shape)
          throw_input("tensor '", specs[idx].name, "' has shape ", shape_to_string(t.sizes().vec()), ", expected ",
                      shape_to_string(specs[idx].shape));
        mine.push_back({specs[idx].name, 0, t.to(at::kFloat).contiguous().reshape({-1})});
      });
      w.write_tensors(kModelGroup, round, mine, options.dtype);
    }
    if (options.lora) w.write_lora_record(*options.lora);
    if (options.value_head) w.write_value_head_record(*options.value_head);
    if (!options.train_state.values().empty()) w.write_train_state(options.train_state);
    if (!options.config_toml.empty()) w.write_config_toml(options.config_toml);
    w.close();
  } catch (...) {
    if (rank == 0) std::remove(tmp.c_str());
    throw;
  }
  barrier(comm);
  on_rank0(comm, [&] { commit_file(tmp, path); });
}

}  // namespace wmtp
