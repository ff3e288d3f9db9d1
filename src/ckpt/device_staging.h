// Host copies of checkpoint data that may live on a GPU, fetched one dataset ahead: while HDF5 writes
// dataset i, the device->host copies of dataset i+1 run (asynchronous copies into pinned memory on
// the current stream). Host data passes through untouched, so a checkpoint written from GPU shards
// holds the same bytes as one written from the same values on the CPU (conversions, e.g. to bf16,
// happen on the host copy in both cases).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "comm/device.h"

namespace wmtp {

struct TensorPiece;

// The data of the non-empty pieces, one group per dataset (the writer's by-spec grouping).
std::vector<std::vector<at::Tensor>> piece_data(const std::vector<std::vector<const TensorPiece*>>& by_spec);

class HostStager {
 public:
  // groups[i]: the float32 tensors (CPU or GPU) dataset i is written from, in order.
  explicit HostStager(std::vector<std::vector<at::Tensor>> groups);
  // Contiguous float32 host tensors of group i (call with i = 0, 1, 2, ...); queues group i+1's
  // copies before waiting for group i's.
  std::vector<at::Tensor> take(size_t i);

 private:
  struct Staged {
    std::vector<at::Tensor> host;
    std::vector<StreamFence> fences;
    bool started = false;
  };
  void start(size_t i);
  std::vector<std::vector<at::Tensor>> groups_;
  std::vector<Staged> staged_;
};

}  // namespace wmtp
