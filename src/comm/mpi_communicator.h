// MpiCommunicator: the Communicator over an MPI communicator, for CPU tensors. Blocking calls use
// MPI's blocking collectives (best-tuned path); async calls use MPI_I* collectives. Each call's bytes
// are counted by link when the communicator it duplicates counts them (link_bytes.h).
#pragma once
#include <mpi.h>

#include <memory>

#include "comm/communicator.h"

namespace wmtp {

class CommLinks;

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm` so our traffic never matches anyone else's messages (the duplicate keeps its
  // watchdog and byte counting).
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  MPI_Comm comm() const { return comm_; }

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
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<const CommLinks> links_;  // null: not counted
};

}  // namespace wmtp
