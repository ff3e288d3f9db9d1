// ParamSource: where a model unit's weights come from when it runs. This is the seam between the
// model (which has no collectives) and the sharding engine (which applies parallelism in one place).
//
// The model is written functionally: it owns no parameter tensors. Before a unit runs its forward
// it calls begin_unit(unit) and receives the unit's tensors by FQN (Meta names, e.g.
// "layers.3.attention.wq.weight"); right after, it calls end_unit(unit, output) with the unit's
// output tensor. Implementations:
//   - LocalParams (model/local_params.h): plain tensors held in one process; begin/end are no-ops.
//     The single-process reference and the equivalence tests use it.
//   - The sharding engine (shard/): begin_unit all-gathers the unit's flat shard through an autograd
//     function and returns views into the gathered buffer (cast to param_dtype); end_unit frees the
//     buffer under full_shard and hooks `output` so the buffer is re-gathered before the unit's
//     backward. Under activation checkpointing the recompute calls begin_unit/end_unit again.
// Returned tensors stay valid until end_unit of the same unit. They may be views of one buffer:
// the model must not resize them or write into them.
//
// Unit names: "tok_embeddings", "layers.{i}", "extra_heads.{j}", "norm" (the shared final norm),
// "output" (the shared output projection), "value_head".
#pragma once
#include <ATen/core/Tensor.h>

#include <string>
#include <unordered_map>

namespace wmtp {

using UnitParams = std::unordered_map<std::string, at::Tensor>;  // FQN -> tensor

class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual UnitParams begin_unit(const std::string& unit) = 0;
  virtual void end_unit(const std::string& unit, const at::Tensor& output) = 0;
};

}  // namespace wmtp
