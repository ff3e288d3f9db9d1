// MpiCommunicator: collectives over MPI on CPU tensors; bf16 reductions widened to fp32.
#include "comm/mpi_communicator.h"

#include <ATen/ATen.h>

#include <climits>
#include <functional>
#include <vector>

#include "core/check.h"
#include "comm/link_bytes.h"
#include "comm/mpi_watch.h"

namespace wmtp {

namespace {

void check_tensor(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw_runtime("MpiCommunicator: ", what, " is undefined");
  if (!t.is_contiguous()) throw_runtime("MpiCommunicator: ", what, " must be contiguous");
  if (!t.device().is_cpu())
    throw_runtime("MpiCommunicator: ", what, " is on ", t.device().str(),
                  "; the MPI backend takes CPU tensors (use NCCL for CUDA)");
  if (t.numel() > INT_MAX)
    throw_runtime("MpiCommunicator: ", what, " has ", t.numel(), " elements (> INT_MAX per call)");
}

// all_gather: out holds `size` blocks of in; reduce_scatter: in holds `size` blocks of out.
void check_gather(const at::Tensor& in, const at::Tensor& out, int size) {
  check_tensor(in, "all_gather input");
  check_tensor(out, "all_gather output");
  WMTP_CHECK(in.scalar_type() == out.scalar_type(), "all_gather dtypes differ");
  WMTP_CHECK(out.numel() == in.numel() * size, "all_gather output has ", out.numel(), " elements, expected ",
             in.numel() * size);
}
void check_scatter(const at::Tensor& in, const at::Tensor& out, int size) {
  check_tensor(in, "reduce_scatter input");
  check_tensor(out, "reduce_scatter output");
  WMTP_CHECK(in.scalar_type() == out.scalar_type(), "reduce_scatter dtypes differ");
  WMTP_CHECK(in.numel() == out.numel() * size, "reduce_scatter input has ", in.numel(), " elements, expected ",
             out.numel() * size);
}

// The MPI type that moves these bytes (bf16 travels as 16-bit words when nothing is reduced).
MPI_Datatype mpi_type(at::ScalarType st) {
  switch (st) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    case at::kBFloat16: return MPI_UINT16_T;
    default: throw_runtime("MpiCommunicator: unsupported dtype ", c10::toString(st));
  }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

// What MPI reduces on, and how the result gets back into the caller's tensor.
struct Reduction {
  at::Tensor send;  // undefined: MPI_IN_PLACE on recv
  at::Tensor recv;
  at::Tensor dst;  // caller's output
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_SUM;
  bool avg = false;
  int size = 1;

  void finish() {
    if (avg) recv.div_(size);
    if (!recv.is_same(dst)) dst.copy_(recv);
  }
  const void* send_ptr() const { return send.defined() ? send.data_ptr() : MPI_IN_PLACE; }
};

Reduction plan_reduction(const at::Tensor& in, const at::Tensor& out, bool in_place, ReduceOp op, int size) {
  Reduction r;
  r.dst = out;
  r.op = mpi_op(op);
  r.size = size;
  r.avg = op == ReduceOp::Avg;
  at::ScalarType st = out.scalar_type();
  if (r.avg && (st == at::kInt || st == at::kLong))
    throw_runtime("MpiCommunicator: avg of integer tensors is refused (it would truncate); reduce with sum");
  if (st == at::kBFloat16) {
    // Widen to fp32 so the sum is rounded once, not once per hop.
    r.type = MPI_FLOAT;
    r.recv = in_place ? out.to(at::kFloat) : at::empty(out.sizes(), out.options().dtype(at::kFloat));
    if (!in_place) r.send = in.to(at::kFloat);
  } else {
    r.type = mpi_type(st);
    r.recv = out;
    if (!in_place) r.send = in;
  }
  return r;
}

class MpiWork final : public CommWork {
 public:
  MpiWork(MPI_Request req, std::vector<at::Tensor> keep, std::function<void()> finish, std::function<void()> watched)
      : req_(req), keep_(std::move(keep)), finish_(std::move(finish)), watched_(std::move(watched)) {}
  ~MpiWork() override { wait_unless_waited(); }

 protected:
  void complete() override {
    const int rc = MPI_Wait(&req_, MPI_STATUS_IGNORE);
    watched_();  // done or failed: no longer the watchdog's business
    WMTP_MPI_CHECK(rc);
    if (finish_) finish_();
    keep_.clear();
  }

 private:
  MPI_Request req_;
  std::vector<at::Tensor> keep_;
  std::function<void()> finish_;
  std::function<void()> watched_;  // ends the watch (mpi_watch.h)
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
  WMTP_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  WMTP_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  WMTP_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  links_ = links_of(comm_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

// ---- blocking ----

void MpiCommunicator::all_gather(const at::Tensor& in, const at::Tensor& out) {
  check_gather(in, out, size_);
  MPI_Datatype t = mpi_type(in.scalar_type());
  WatchedMpiCall watch(comm_, "all_gather");
  WMTP_MPI_CHECK(MPI_Allgather(in.data_ptr(), int(in.numel()), t, out.data_ptr(), int(in.numel()), t, comm_));
  if (links_) links_->all_gather(in.nbytes());
}

void MpiCommunicator::reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  check_scatter(in, out, size_);
  Reduction r = plan_reduction(in, out, /*in_place=*/false, op, size_);
  WatchedMpiCall watch(comm_, "reduce_scatter");
  WMTP_MPI_CHECK(MPI_Reduce_scatter_block(r.send_ptr(), r.recv.data_ptr(), int(out.numel()), r.type, r.op, comm_));
  if (links_) links_->reduce_scatter(r.recv.nbytes());  // the wire's dtype: bf16 widened
  r.finish();
}

void MpiCommunicator::all_reduce(const at::Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce tensor");
  Reduction r = plan_reduction(t, t, /*in_place=*/true, op, size_);
  WatchedMpiCall watch(comm_, "all_reduce");
  WMTP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, r.recv.data_ptr(), int(t.numel()), r.type, r.op, comm_));
  if (links_) links_->all_reduce(t.numel(), r.recv.element_size());
  r.finish();
}

void MpiCommunicator::broadcast(const at::Tensor& t, int root) {
  check_tensor(t, "broadcast tensor");
  WatchedMpiCall watch(comm_, "broadcast");
  WMTP_MPI_CHECK(MPI_Bcast(t.data_ptr(), int(t.numel()), mpi_type(t.scalar_type()), root, comm_));
  if (links_) links_->broadcast(t.nbytes(), root);
}

void MpiCommunicator::barrier() {
  WatchedMpiCall watch(comm_, "barrier");
  WMTP_MPI_CHECK(MPI_Barrier(comm_));
}

// ---- non-blocking ----

CommWorkPtr MpiCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  check_gather(in, out, size_);
  MPI_Datatype t = mpi_type(in.scalar_type());
  MPI_Request req;
  WMTP_MPI_CHECK(MPI_Iallgather(in.data_ptr(), int(in.numel()), t, out.data_ptr(), int(in.numel()), t, comm_, &req));
  if (links_) links_->all_gather(in.nbytes());
  auto watched = watch_mpi_request(comm_, "all_gather_async");
  return std::make_unique<MpiWork>(req, std::vector<at::Tensor>{in, out}, nullptr, std::move(watched));
}

CommWorkPtr MpiCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  check_scatter(in, out, size_);
  auto r = std::make_shared<Reduction>(plan_reduction(in, out, false, op, size_));
  MPI_Request req;
  WMTP_MPI_CHECK(
      MPI_Ireduce_scatter_block(r->send_ptr(), r->recv.data_ptr(), int(out.numel()), r->type, r->op, comm_, &req));
  if (links_) links_->reduce_scatter(r->recv.nbytes());
  auto watched = watch_mpi_request(comm_, "reduce_scatter_async");
  return std::make_unique<MpiWork>(
      req, std::vector<at::Tensor>{in, out}, [r] { r->finish(); }, std::move(watched));
}

CommWorkPtr MpiCommunicator::all_reduce_async(const at::Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce tensor");
  auto r = std::make_shared<Reduction>(plan_reduction(t, t, true, op, size_));
  MPI_Request req;
  WMTP_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, r->recv.data_ptr(), int(t.numel()), r->type, r->op, comm_, &req));
  if (links_) links_->all_reduce(t.numel(), r->recv.element_size());
  auto watched = watch_mpi_request(comm_, "all_reduce_async");
  return std::make_unique<MpiWork>(
      req, std::vector<at::Tensor>{t}, [r] { r->finish(); }, std::move(watched));
}

CommWorkPtr MpiCommunicator::broadcast_async(const at::Tensor& t, int root) {
  check_tensor(t, "broadcast tensor");
  MPI_Request req;
  WMTP_MPI_CHECK(MPI_Ibcast(t.data_ptr(), int(t.numel()), mpi_type(t.scalar_type()), root, comm_, &req));
  if (links_) links_->broadcast(t.nbytes(), root);
  auto watched = watch_mpi_request(comm_, "broadcast_async");
  return std::make_unique<MpiWork>(req, std::vector<at::Tensor>{t}, nullptr, std::move(watched));
}

}  // namespace wmtp
