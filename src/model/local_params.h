// LocalParams: the single-process ParamSource. Holds every parameter as a full tensor (the fp32
// masters, leaves with requires_grad set from ParamSpec::trainable) and hands a unit its tensors on
// begin_unit; end_unit does nothing. With a compute dtype (e.g. bf16) begin_unit returns
// differentiable casts of the masters, so gradients still land in the fp32 leaves — the same
// arithmetic the sharding engine does with param_dtype = bf16.
// Counts begin_unit calls per unit (tests use it to see activation checkpointing recompute).
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/param_source.h"
#include "model/param_spec.h"

namespace wmtp {

class LocalParams : public ParamSource {
 public:
  // `tensors` must hold exactly the spec FQNs with the spec shapes (Error(Input) otherwise, naming
  // the FQN). The tensors are taken as they are (dtype, device) and marked requires_grad per spec.
  LocalParams(const std::vector<ParamSpec>& specs, std::unordered_map<std::string, at::Tensor> tensors,
              std::optional<at::ScalarType> compute_dtype = std::nullopt);

  UnitParams begin_unit(const std::string& unit) override;
  void end_unit(const std::string& unit, const at::Tensor& output) override {}

  const at::Tensor& param(const std::string& fqn) const;
  const std::unordered_map<std::string, at::Tensor>& params() const { return tensors_; }
  // Trainable leaves in spec order (what an optimizer steps).
  std::vector<at::Tensor> trainable_params() const;
  const std::vector<ParamSpec>& specs() const { return specs_; }
  void zero_grad();
  int64_t begin_count(const std::string& unit) const;

 private:
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, at::Tensor> tensors_;
  std::map<std::string, std::vector<std::string>> unit_fqns_;
  std::map<std::string, int64_t> begin_counts_;
  std::optional<at::ScalarType> compute_dtype_;
};

}  // namespace wmtp
