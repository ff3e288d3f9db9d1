// LocalParams: full tensors in one process.
#include "model/local_params.h"

#include <ATen/ATen.h>

#include "core/error.h"

namespace wmtp {

LocalParams::LocalParams(const std::vector<ParamSpec>& specs, std::unordered_map<std::string, at::Tensor> tensors,
                         std::optional<at::ScalarType> compute_dtype)
    : specs_(specs), tensors_(std::move(tensors)), compute_dtype_(compute_dtype) {
  for (const auto& s : specs_) {
    auto it = tensors_.find(s.fqn);
    if (it == tensors_.end()) throw_input("parameter '", s.fqn, "' is missing");
    if (it->second.sizes() != at::IntArrayRef(s.shape))
      throw_input("parameter '", s.fqn, "' has shape ", it->second.sizes(), ", expected ", at::IntArrayRef(s.shape));
    it->second.requires_grad_(s.trainable);
    unit_fqns_[s.unit].push_back(s.fqn);
  }
  if (tensors_.size() != specs_.size()) {
    for (const auto& kv : tensors_) {
      bool known = false;
      for (const auto& s : specs_) known = known || s.fqn == kv.first;
      if (!known) throw_input("unexpected parameter '", kv.first, "' (not in the model)");
    }
  }
}

UnitParams LocalParams::begin_unit(const std::string& unit) {
  auto it = unit_fqns_.find(unit);
  WMTP_CHECK(it != unit_fqns_.end(), "unknown unit '", unit, "'");
  ++begin_counts_[unit];
  UnitParams out;
  for (const auto& fqn : it->second) {
    const at::Tensor& t = tensors_.at(fqn);
    out.emplace(fqn, compute_dtype_ && t.scalar_type() != *compute_dtype_ ? t.to(*compute_dtype_) : t);
  }
  return out;
}

const at::Tensor& LocalParams::param(const std::string& fqn) const {
  auto it = tensors_.find(fqn);
  WMTP_CHECK(it != tensors_.end(), "unknown parameter '", fqn, "'");
  return it->second;
}

std::vector<at::Tensor> LocalParams::trainable_params() const {
  std::vector<at::Tensor> out;
  for (const auto& s : specs_)
    if (s.trainable) out.push_back(tensors_.at(s.fqn));
  return out;
}

void LocalParams::zero_grad() {
  for (auto& kv : tensors_) {
    if (kv.second.grad().defined()) kv.second.mutable_grad() = at::Tensor();
  }
}

int64_t LocalParams::begin_count(const std::string& unit) const {
  auto it = begin_counts_.find(unit);
  return it == begin_counts_.end() ? 0 : it->second;
}

}  // namespace wmtp
