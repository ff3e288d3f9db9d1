// ParamPiece: a contiguous range of one tensor's row-major flattened elements held by this rank —
// the unit in which the sharding engine hands parameters and optimizer state to checkpoints, and
// takes them back (at any world size: a piece need not match what this rank owns).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace wmtp {

struct ParamPiece {
  std::string fqn;     // parameter name, e.g. "layers.0.attention.wq.weight"
  int64_t offset = 0;  // first flattened element
  at::Tensor data;     // 1-D: elements [offset, offset + data.numel())
};

}  // namespace wmtp
