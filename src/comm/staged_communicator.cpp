// StagedCommunicator: device tensors reduced over MPI through (pinned) host buffers.
#include "comm/staged_communicator.h"

#include <ATen/ATen.h>

#include <vector>

#include "core/error.h"
#include "comm/device.h"

namespace wmtp {

namespace {

// A host copy of `t` (complete: the copy waits for the stream that produces `t`).
at::Tensor stage_down(const at::Tensor& t) {
  at::Tensor h = host_staging_buffer(t.sizes(), t.scalar_type(), t.device());
  h.copy_(t);
  return h;
}
// An uninitialized host buffer shaped like `t`.
at::Tensor host_like(const at::Tensor& t) { return host_staging_buffer(t.sizes(), t.scalar_type(), t.device()); }
// The result back into the caller's tensor: non-blocking from pinned memory, ordered on the
// current stream; the caching host allocator keeps the pinned block until the copy has run.
void stage_up(const at::Tensor& dst, const at::Tensor& host) { dst.copy_(host, /*non_blocking=*/!dst.is_cpu()); }

// Waits for the MPI collective on the host buffers, then copies the result up.
class StagedWork final : public CommWork {
 public:
  StagedWork(CommWorkPtr inner, at::Tensor dst, at::Tensor host, std::vector<at::Tensor> keep)
      : inner_(std::move(inner)), dst_(std::move(dst)), host_(std::move(host)), keep_(std::move(keep)) {}
  ~StagedWork() override { wait_unless_waited(); }

 protected:
  void complete() override {
    inner_->wait();
    stage_up(dst_, host_);
    keep_.clear();
  }

 private:
  CommWorkPtr inner_;
  at::Tensor dst_, host_;
  std::vector<at::Tensor> keep_;
};

void check_defined(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw_runtime("StagedCommunicator: ", what, " is undefined");
  if (!t.is_contiguous()) throw_runtime("StagedCommunicator: ", what, " must be contiguous");
}

}  // namespace

StagedCommunicator::StagedCommunicator(MPI_Comm comm, bool stage_host_tensors)
    : mpi_(comm), stage_host_(stage_host_tensors) {}

// Both tensors on the host and not forced through staging: MPI directly. Both on one GPU: staged.
bool StagedCommunicator::staged(const at::Tensor& a, const at::Tensor& b, const char* op) const {
  check_defined(a, op);
  check_defined(b, op);
  if (a.device() != b.device())
    throw_runtime("StagedCommunicator: ", op, " input is on ", a.device().str(), " but its output on ",
                  b.device().str(), "; both must be on the same device");
  if (a.scalar_type() != b.scalar_type())
    throw_runtime("StagedCommunicator: ", op, " input is ", c10::toString(a.scalar_type()), " but its output ",
                  c10::toString(b.scalar_type()));
  return !a.is_cpu() || stage_host_;
}

void StagedCommunicator::all_gather(const at::Tensor& in, const at::Tensor& out) {
  if (!staged(in, out, "all_gather")) return mpi_.all_gather(in, out);
  at::Tensor h_out = host_like(out);
  mpi_.all_gather(stage_down(in), h_out);
  stage_up(out, h_out);
}

void StagedCommunicator::reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  if (!staged(in, out, "reduce_scatter")) return mpi_.reduce_scatter(in, out, op);
  at::Tensor h_out = host_like(out);
  mpi_.reduce_scatter(stage_down(in), h_out, op);
  stage_up(out, h_out);
}

void StagedCommunicator::all_reduce(const at::Tensor& t, ReduceOp op) {
  if (!staged(t, t, "all_reduce")) return mpi_.all_reduce(t, op);
  at::Tensor h = stage_down(t);
  mpi_.all_reduce(h, op);
  stage_up(t, h);
}

void StagedCommunicator::broadcast(const at::Tensor& t, int root) {
  if (!staged(t, t, "broadcast")) return mpi_.broadcast(t, root);
  at::Tensor h = stage_down(t);
  mpi_.broadcast(h, root);
  stage_up(t, h);
}

void StagedCommunicator::barrier() { mpi_.barrier(); }

CommWorkPtr StagedCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  if (!staged(in, out, "all_gather")) return mpi_.all_gather_async(in, out);
  at::Tensor h_out = host_like(out);
  auto inner = mpi_.all_gather_async(stage_down(in), h_out);
  return std::make_unique<StagedWork>(std::move(inner), out, h_out, std::vector<at::Tensor>{in});
}

CommWorkPtr StagedCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  if (!staged(in, out, "reduce_scatter")) return mpi_.reduce_scatter_async(in, out, op);
  at::Tensor h_out = host_like(out);
  auto inner = mpi_.reduce_scatter_async(stage_down(in), h_out, op);
  return std::make_unique<StagedWork>(std::move(inner), out, h_out, std::vector<at::Tensor>{in});
}

CommWorkPtr StagedCommunicator::all_reduce_async(const at::Tensor& t, ReduceOp op) {
  if (!staged(t, t, "all_reduce")) return mpi_.all_reduce_async(t, op);
  at::Tensor h = stage_down(t);
  auto inner = mpi_.all_reduce_async(h, op);
  return std::make_unique<StagedWork>(std::move(inner), t, h, std::vector<at::Tensor>{});
}

CommWorkPtr StagedCommunicator::broadcast_async(const at::Tensor& t, int root) {
  if (!staged(t, t, "broadcast")) return mpi_.broadcast_async(t, root);
  at::Tensor h = stage_down(t);
  auto inner = mpi_.broadcast_async(h, root);
  return std::make_unique<StagedWork>(std::move(inner), t, h, std::vector<at::Tensor>{});
}

}  // namespace wmtp
