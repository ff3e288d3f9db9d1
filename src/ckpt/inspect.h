// convert-checkpoint inspect and verify.
// inspect: a readable summary of a wmtp checkpoint (attributes, step, world size at save, LoRA
//   info, every group's tensors with shapes and dtypes, /train values, the config) — or, for a
//   safetensors file/directory, its tensors and metadata. One process.
// verify: every tensor finite, checksums equal to the stored ones, tensor names and shapes consistent
//   with the model args (base parameters, LoRA adapters against their projections, optimizer moments
//   against their parameters). Collective: each rank reads an equal share of every tensor.
#pragma once
#include <mpi.h>

#include <ostream>
#include <string>
#include <vector>

namespace wmtp {

void inspect_weights(const std::string& path, std::ostream& out, bool print_config);

struct VerifyReport {
  int64_t tensors = 0;
  int64_t elements = 0;
  std::vector<std::string> problems;  // empty: the checkpoint is sound
};
VerifyReport verify_checkpoint(const std::string& path, MPI_Comm comm);

}  // namespace wmtp
