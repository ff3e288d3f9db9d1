// ParamSpec: the description of one model parameter that the model publishes and the sharding
// engine and checkpoints consume: Meta FQN, the shard unit it belongs to, logical shape, and
// whether it is trained (LoRA base weights and frozen reference/critic models are not).
// The order of a model's spec list is deterministic (the same on every rank and every run): the
// engine lays out flat buffers in that order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace wmtp {

struct ParamSpec {
  std::string fqn;             // "layers.3.attention.wq.weight"
  std::string unit;            // "layers.3" (see param_source.h for unit names)
  std::vector<int64_t> shape;  // logical shape, e.g. {dim, dim}
  bool trainable = true;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

}  // namespace wmtp
