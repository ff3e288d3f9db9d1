// NcclCommunicator: the Communicator over NCCL for CUDA tensors (compiled only with WMTP_WITH_CUDA).
//
// Streams: collectives run on the communicator's own stream. LibTorch computes on the legacy default
// stream unless told otherwise, so every collective first makes its stream wait for the default
// stream (inputs are ready), and completion is published back to the default stream by an event:
// blocking calls return once the default stream is ordered after the collective (no host sync);
// wait() on an async handle does the same. Tensors stay referenced by the handle until wait(), so
// the caching allocator cannot recycle them under NCCL. bf16 reductions are widened to fp32 on the
// GPU (same contract as the MPI backend: one rounding); avg is sum / size().
#pragma once
#ifdef WMTP_WITH_CUDA
#include <mpi.h>

#include "dist/communicator.h"

namespace wmtp {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm`: rank 0 creates the NCCL id and broadcasts it over MPI. `device` is the
  // CUDA device this rank uses (usually the node-local rank).
  NcclCommunicator(MPI_Comm comm, int device);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

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
  struct Impl;
  Impl* impl_;
  int rank_ = 0, size_ = 1;
};

}  // namespace wmtp
#endif
