// StagedCommunicator: the Communicator for device tensors over MPI, through host buffers (pinned
// for GPU tensors). Every device collective copies its input to the host (waiting for the current
// stream, so the input is complete), runs the MPI collective there, and copies the result back up
// with a non-blocking copy on the current stream. Slow next to NCCL (two copies and a stream sync
// per call), but it has what NCCL lacks: several ranks may share one GPU, so 2-4 ranks can run
// multi-rank tests on a one-GPU machine ([runtime] communicator = "staged"); and it needs no NCCL.
//
// CPU tensors go to MPI directly (with CPU tensors only, this is an MpiCommunicator), so host-side
// statistics and scalars work whatever the device. `stage_host_tensors` makes CPU tensors take the
// staging path too (copy out, reduce, copy back): CPU tests use it to exercise that path.
// Semantics (dtypes, bf16 widened to fp32 and rounded once, avg refused on integers, async handles
// owning their tensors) are MpiCommunicator's; see communicator.h.
#pragma once
#include <mpi.h>

#include "comm/mpi_communicator.h"

namespace wmtp {

class StagedCommunicator final : public Communicator {
 public:
  explicit StagedCommunicator(MPI_Comm comm, bool stage_host_tensors = false);

  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  std::string backend() const override { return "staged"; }

  void all_gather(const at::Tensor& in, const at::Tensor& out) override;
  void reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  void all_reduce(const at::Tensor& t, ReduceOp op) override;
  void broadcast(const at::Tensor& t, int root) override;
  void barrier() override;

  CommWorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) override;
  CommWorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override;
  CommWorkPtr all_reduce_async(const at::Tensor& t, ReduceOp op) override;
  CommWorkPtr broadcast_async(const at::Tensor& t, int root) override;

 private:
  bool staged(const at::Tensor& a, const at::Tensor& b, const char* op) const;
  MpiCommunicator mpi_;
  bool stage_host_;
};

}  // namespace wmtp
