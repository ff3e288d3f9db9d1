// HostStager: device->pinned-host copies queued one dataset ahead of the HDF5 writes.
#include "ckpt/device_staging.h"

#include <ATen/ATen.h>

#include "core/tensor_piece.h"

namespace wmtp {

std::vector<std::vector<at::Tensor>> piece_data(const std::vector<std::vector<const TensorPiece*>>& by_spec) {
  std::vector<std::vector<at::Tensor>> out(by_spec.size());
  for (size_t i = 0; i < by_spec.size(); ++i)
    for (const TensorPiece* p : by_spec[i])
      if (p->data.numel() > 0) out[i].push_back(p->data);
  return out;
}

HostStager::HostStager(std::vector<std::vector<at::Tensor>> groups)
    : groups_(std::move(groups)), staged_(groups_.size()) {}

void HostStager::start(size_t i) {
  if (i >= groups_.size() || staged_[i].started) return;
  Staged& s = staged_[i];
  s.started = true;
  for (const at::Tensor& t : groups_[i]) {
    if (t.device().is_cpu()) {
      s.host.push_back(t.to(at::kFloat).contiguous());
      continue;
    }
    at::Tensor h = host_staging_buffer(t.sizes(), at::kFloat, t.device());
    h.copy_(t.to(at::kFloat), /*non_blocking=*/true);
    s.host.push_back(h);
    s.fences.push_back(StreamFence::record(t.device()));
  }
  groups_[i].clear();  // the device tensors are referenced by the queued copies until they run
}

std::vector<at::Tensor> HostStager::take(size_t i) {
  start(i);
  start(i + 1);  // overlap: the next dataset's copies run while the caller writes this one
  Staged& s = staged_[i];
  for (const StreamFence& f : s.fences) f.wait();
  std::vector<at::Tensor> out = std::move(s.host);
  s = Staged{};
  s.started = true;
  return out;
}

}  // namespace wmtp
