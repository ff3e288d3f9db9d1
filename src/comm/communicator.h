// Communicator: the collectives the sharding engine and trainer need, on contiguous at::Tensors.
//
// Contract (every implementation):
// - Collective: every rank of the communicator calls the same operation, in the same order, with
//   tensors of the same dtype and numel.
// - Tensors must be contiguous; `in` and `out` must not overlap unless stated.
// - all_gather(in, out):       out.numel() == size() * in.numel(); rank r's block lands at r*in.numel().
// - reduce_scatter(in, out):   in.numel() == size() * out.numel(); rank r receives block r reduced.
// - all_reduce(t), broadcast(t, root): in place.
// - Dtypes: float32, bfloat16, int32, int64 (and float64, for scalars such as loss sums). bf16
//   *reductions*: the MPI and staged backends widen to fp32, reduce and round once (MPI has no bf16
//   type); NCCL reduces bf16 natively (half the traffic; rounded per hop), which is what
//   [sharding] reduce_dtype = "bf16" asks for. Avg is sum / size() (the division on the result);
//   on integer tensors it is refused (no silent truncation).
// - Devices: MPI takes host tensors; NCCL takes tensors on its rank's GPU; staged takes either.
//   Every backend accepts host tensors (scalars, token counts, small statistics), so the trainer's
//   host-side figures never depend on the device. in and out must share a device and a dtype.
// - Non-blocking forms return a CommWork that owns references to every tensor involved (and any
//   temporary) until wait(); the caller must not read `out` (or write `in`) before wait(). Dropping
//   an unwaited CommWork waits in its destructor, so a buffer can never be freed under MPI.
// - Bytes: every backend counts what this rank sends, inside its node and across nodes, when the MPI
//   communicator it was made from carries the counting (link_bytes.h; the runtime's do).
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

namespace wmtp {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);

class CommWork {
 public:
  virtual ~CommWork() = default;
  // Completes the collective once; later calls return at once.
  void wait() {
    if (waited_) return;
    waited_ = true;
    complete();
  }

 protected:
  virtual void complete() = 0;  // the backend's wait: afterwards `out` may be read
  // Every backend's destructor calls this first, while its members are still alive (the base
  // destructor runs too late for that). A failed wait there cannot be reported; the next collective
  // fails loudly.
  void wait_unless_waited() noexcept {
    try {
      wait();
    } catch (...) {
    }
  }

 private:
  bool waited_ = false;
};
using CommWorkPtr = std::unique_ptr<CommWork>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "nccl", "staged"

  virtual void all_gather(const at::Tensor& in, const at::Tensor& out) = 0;
  virtual void reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) = 0;
  virtual void all_reduce(const at::Tensor& t, ReduceOp op) = 0;
  virtual void broadcast(const at::Tensor& t, int root) = 0;
  virtual void barrier() = 0;

  virtual CommWorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) = 0;
  virtual CommWorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) = 0;
  virtual CommWorkPtr all_reduce_async(const at::Tensor& t, ReduceOp op) = 0;
  virtual CommWorkPtr broadcast_async(const at::Tensor& t, int root) = 0;

  // Scalar conveniences (blocking, host tensors: every backend takes them): sums, maxima and
  // "did any rank" flags for the trainer.
  double all_reduce_scalar(double v, ReduceOp op);
  int64_t all_reduce_scalar(int64_t v, ReduceOp op);
};

}  // namespace wmtp
