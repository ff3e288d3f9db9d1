// TensorPiece: a contiguous range of one tensor's row-major flattened elements held by this rank.
// It is the unit in which the sharding engine hands parameters and optimizer state out (and takes
// them back), and the unit in which checkpoints are written and read — one type for both, so no
// conversion sits between them. A piece need not match what the rank owns: a checkpoint can be read
// back at any world size with any partition.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace wmtp {

struct TensorPiece {
  std::string name;    // tensor name (a parameter's FQN, e.g. "layers.0.attention.wq.weight")
  int64_t offset = 0;  // first flattened element
  at::Tensor data;     // 1-D (CPU or GPU): elements [offset, offset + data.numel())
};

}  // namespace wmtp
