// NcclCommunicator: the Communicator over NCCL for CUDA tensors (compiled only with WMTP_WITH_CUDA).
//
// Streams: collectives run on a communication stream of this rank's device, ordered after the
// *current* stream (the one LibTorch is queueing the caller's kernels on, which autograd sets per
// backward op) by an event; every tensor involved is marked in use on the communication stream for
// the caching allocator (recordStream), so freeing it early cannot hand its memory to a kernel that
// runs before the collective. Completion is published back to the current stream of whoever waits:
// blocking calls return once that stream is ordered after the collective (no host sync); wait() on
// an async handle does the same. Compute and communication thus overlap without host stalls.
//
// Dtypes: bf16 is reduced natively (ncclBfloat16: half the traffic of widening, which is what
// [sharding] reduce_dtype = "bf16" asks for; the sum is rounded per hop, not once as MPI's widened
// sum is). Avg = sum, then divide by size() on the waiting stream, for every backend alike.
// Host tensors (scalars, token counts, small statistics) are reduced over MPI by an internal
// MpiCommunicator: never rejected, and no device round trip.
//
// Bytes: device collectives count what this rank sends by link (link_bytes.h) when `comm` counts.
//
// Hangs: a CollectiveWatchdog thread polls ncclCommGetAsyncError and the oldest unfinished
// collective; after `timeout_s` (or on an asynchronous error) it prints a message naming this rank
// and the collective, aborts the NCCL communicator so its kernels return, and MPI_Aborts the job.
#pragma once
#ifdef WMTP_WITH_CUDA
#include <mpi.h>

#include <memory>

#include "comm/communicator.h"

namespace wmtp {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm`: rank 0 creates the NCCL id and broadcasts it over MPI. `device` is the
  // CUDA device index this rank uses (one rank per GPU: NCCL refuses two ranks on one device).
  // timeout_s <= 0 disables the timeout (asynchronous errors are still reported).
  NcclCommunicator(MPI_Comm comm, int device, double timeout_s = 600);
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

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
};

}  // namespace wmtp
#endif
