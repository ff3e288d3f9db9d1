// NcclCommunicator: NCCL collectives on CUDA tensors, ordered against LibTorch's default stream by
// events. Built only with WMTP_WITH_CUDA (src/CMakeLists.txt picks nccl_*.cpp files).
#include "dist/nccl_communicator.h"

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <vector>

#include "core/check.h"

namespace wmtp {

void throw_cuda_error(int code, const char* expr, const char* file, int line) {
  throw_runtime(source_location(file, line), ": ", expr, " failed (", rank_and_host(),
                "): ", cudaGetErrorString(static_cast<cudaError_t>(code)));
}
void throw_nccl_error(int code, const char* expr, const char* file, int line) {
  throw_runtime(source_location(file, line), ": ", expr, " failed (", rank_and_host(),
                "): ", ncclGetErrorString(static_cast<ncclResult_t>(code)));
}

namespace {

ncclDataType_t nccl_type(at::ScalarType st) {
  switch (st) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kBFloat16: return ncclBfloat16;
    default: throw_runtime("NcclCommunicator: unsupported dtype ", c10::toString(st));
  }
}

void check_tensor(const at::Tensor& t, const char* what) {
  if (!t.defined() || !t.is_contiguous() || !t.is_cuda())
    throw_runtime("NcclCommunicator: ", what, " must be a defined, contiguous CUDA tensor");
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;

  // Make our stream wait for everything queued so far on the default stream.
  void after_default_stream() {
    cudaEvent_t ev;
    WMTP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    WMTP_CUDA_CHECK(cudaEventRecord(ev, cudaStreamLegacy));
    WMTP_CUDA_CHECK(cudaStreamWaitEvent(stream, ev, 0));
    WMTP_CUDA_CHECK(cudaEventDestroy(ev));
  }
  cudaEvent_t record_done() {
    cudaEvent_t ev;
    WMTP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    WMTP_CUDA_CHECK(cudaEventRecord(ev, stream));
    return ev;
  }
};

namespace {

class NcclWork final : public CommWork {
 public:
  NcclWork(cudaEvent_t done, std::vector<at::Tensor> keep, std::function<void()> finish)
      : done_(done), keep_(std::move(keep)), finish_(std::move(finish)) {}
  ~NcclWork() override {
    if (!waited_) {
      try {
        wait();
      } catch (...) {
      }
    }
  }
  void wait() override {
    if (waited_) return;
    waited_ = true;
    // Order the default stream after the collective; the host does not block.
    WMTP_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, done_, 0));
    WMTP_CUDA_CHECK(cudaEventDestroy(done_));
    if (finish_) finish_();  // fp32 -> bf16 copy-back / avg division, on the default stream
    keep_.clear();
  }

 private:
  cudaEvent_t done_;
  std::vector<at::Tensor> keep_;
  std::function<void()> finish_;
  bool waited_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, int device) : impl_(new Impl) {
  WMTP_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  WMTP_MPI_CHECK(MPI_Comm_size(comm, &size_));
  impl_->device = device;
  WMTP_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  if (rank_ == 0) WMTP_NCCL_CHECK(ncclGetUniqueId(&id));
  WMTP_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm));
  WMTP_NCCL_CHECK(ncclCommInitRank(&impl_->comm, size_, id, rank_));
  WMTP_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_->comm) ncclCommDestroy(impl_->comm);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
  delete impl_;
}

CommWorkPtr NcclCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  check_tensor(in, "all_gather input");
  check_tensor(out, "all_gather output");
  WMTP_CHECK(out.numel() == in.numel() * size_, "all_gather output size");
  impl_->after_default_stream();
  WMTP_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), size_t(in.numel()), nccl_type(in.scalar_type()),
                                impl_->comm, impl_->stream));
  return std::make_unique<NcclWork>(impl_->record_done(), std::vector<at::Tensor>{in, out}, nullptr);
}

CommWorkPtr NcclCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  check_tensor(in, "reduce_scatter input");
  check_tensor(out, "reduce_scatter output");
  WMTP_CHECK(in.numel() == out.numel() * size_, "reduce_scatter input size");
  bool widen = in.scalar_type() == at::kBFloat16;
  at::Tensor send = widen ? in.to(at::kFloat) : in;
  at::Tensor recv = widen ? at::empty(out.sizes(), out.options().dtype(at::kFloat)) : out;
  impl_->after_default_stream();
  WMTP_NCCL_CHECK(ncclReduceScatter(send.data_ptr(), recv.data_ptr(), size_t(out.numel()),
                                    nccl_type(send.scalar_type()), op == ReduceOp::Max ? ncclMax : ncclSum,
                                    impl_->comm, impl_->stream));
  int n = size_;
  auto finish = [recv, out, op, n, widen]() mutable {
    if (op == ReduceOp::Avg) recv.div_(n);
    if (widen) out.copy_(recv);
  };
  return std::make_unique<NcclWork>(impl_->record_done(), std::vector<at::Tensor>{in, out, send, recv}, finish);
}

CommWorkPtr NcclCommunicator::all_reduce_async(const at::Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce tensor");
  if (op == ReduceOp::Avg && (t.scalar_type() == at::kInt || t.scalar_type() == at::kLong))
    throw_runtime("NcclCommunicator: avg of integer tensors is refused (it would truncate); reduce with sum");
  bool widen = t.scalar_type() == at::kBFloat16;
  at::Tensor buf = widen ? t.to(at::kFloat) : t;
  impl_->after_default_stream();
  WMTP_NCCL_CHECK(ncclAllReduce(buf.data_ptr(), buf.data_ptr(), size_t(buf.numel()), nccl_type(buf.scalar_type()),
                                op == ReduceOp::Max ? ncclMax : ncclSum, impl_->comm, impl_->stream));
  int n = size_;
  auto finish = [buf, t, op, n, widen]() mutable {
    if (op == ReduceOp::Avg) buf.div_(n);
    if (widen) t.copy_(buf);
  };
  return std::make_unique<NcclWork>(impl_->record_done(), std::vector<at::Tensor>{t, buf}, finish);
}

CommWorkPtr NcclCommunicator::broadcast_async(const at::Tensor& t, int root) {
  check_tensor(t, "broadcast tensor");
  impl_->after_default_stream();
  WMTP_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.scalar_type()), root,
                                impl_->comm, impl_->stream));
  return std::make_unique<NcclWork>(impl_->record_done(), std::vector<at::Tensor>{t}, nullptr);
}

void NcclCommunicator::all_gather(const at::Tensor& in, const at::Tensor& out) { all_gather_async(in, out)->wait(); }
void NcclCommunicator::reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  reduce_scatter_async(in, out, op)->wait();
}
void NcclCommunicator::all_reduce(const at::Tensor& t, ReduceOp op) { all_reduce_async(t, op)->wait(); }
void NcclCommunicator::broadcast(const at::Tensor& t, int root) { broadcast_async(t, root)->wait(); }
void NcclCommunicator::barrier() {
  // A 1-element all-reduce, then a host sync: every rank has reached this point.
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, impl_->device));
  all_reduce(t, ReduceOp::Sum);
  WMTP_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace wmtp
