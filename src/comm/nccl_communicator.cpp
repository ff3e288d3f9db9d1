// NcclCommunicator: NCCL collectives on CUDA tensors on a communication stream ordered against the
// current stream by events, host tensors over MPI, and a watchdog for hangs. Built only with
// WMTP_WITH_CUDA (src/CMakeLists.txt picks nccl_*.cpp files).
#include "comm/nccl_communicator.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <vector>

#include "core/check.h"
#include "comm/link_bytes.h"
#include "comm/mpi_communicator.h"
#include "comm/watchdog.h"

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
    default:
      throw_runtime("NcclCommunicator: unsupported dtype ", c10::toString(st),
                    " (float32, bfloat16, float64, int32, int64)");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Max ? ncclMax : ncclSum; }

bool is_integer(at::ScalarType st) { return st == at::kInt || st == at::kLong; }

class Watched;

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  std::atomic<ncclComm_t> live{nullptr};  // comm, for the watchdog's thread (null until set up)
  int device = 0;
  std::optional<c10::cuda::CUDAStream> stream;  // communication stream
  std::unique_ptr<MpiCommunicator> cpu_comm;    // host tensors
  std::unique_ptr<CollectiveWatchdog> watchdog;
  std::shared_ptr<const CommLinks> links;  // device collectives' bytes by link (null: not counted)

  void check_tensor(const at::Tensor& t, const char* what) const {
    if (!t.defined()) throw_runtime("NcclCommunicator: ", what, " is undefined");
    if (!t.is_cuda())
      throw_runtime("NcclCommunicator: ", what, " is on ", t.device().str(), ", expected cuda:", device);
    if (t.device().index() != device)
      throw_runtime("NcclCommunicator: ", what, " is on ", t.device().str(),
                    " but this rank's communicator uses cuda:", device, " (one GPU per rank)");
    if (!t.is_contiguous()) throw_runtime("NcclCommunicator: ", what, " must be contiguous");
    nccl_type(t.scalar_type());
  }
  void check_pair(const at::Tensor& in, const at::Tensor& out, const char* op) const {
    check_tensor(in, op);
    check_tensor(out, op);
    if (in.scalar_type() != out.scalar_type())
      throw_runtime("NcclCommunicator: ", op, " input is ", c10::toString(in.scalar_type()), " but its output ",
                    c10::toString(out.scalar_type()));
  }
  void check_avg(const at::Tensor& t, ReduceOp op) const {
    if (op == ReduceOp::Avg && is_integer(t.scalar_type()))
      throw_runtime("NcclCommunicator: avg of integer tensors is refused (it would truncate); reduce with sum");
  }

  // The communication stream waits for the caller's current stream (inputs are ready), and every
  // tensor is marked in use on the communication stream.
  void enter(const std::vector<at::Tensor>& tensors) {
    cudaEvent_t ev;
    WMTP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    WMTP_CUDA_CHECK(cudaEventRecord(ev, c10::cuda::getCurrentCUDAStream(device).stream()));
    WMTP_CUDA_CHECK(cudaStreamWaitEvent(stream->stream(), ev, 0));
    WMTP_CUDA_CHECK(cudaEventDestroy(ev));
    for (const auto& t : tensors) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), *stream);
  }
  // Completion event of what was just queued; the watchdog's entry gets its own event to poll.
  cudaEvent_t leave(Watched& w);
};

// A collective under the watchdog from before its first CUDA/NCCL call (any of them may block: NCCL
// connects to peers inside the first collective) until its completion event is recorded. A call
// that throws on the way ends its watch (the error is reported by the exception, not by a timeout).
namespace {
class Watched {
 public:
  Watched(CollectiveWatchdog& w, const char* op) : w_(w), seq_(w.begin(op)) {}
  ~Watched() {
    if (!posted_) w_.posted(seq_, [] { return true; });
  }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;
  void posted(cudaEvent_t probe) {
    w_.posted(
        seq_, [probe] { return cudaEventQuery(probe) != cudaErrorNotReady; }, [probe] { cudaEventDestroy(probe); });
    posted_ = true;
  }

 private:
  CollectiveWatchdog& w_;
  int64_t seq_;
  bool posted_ = false;
};
}  // namespace

cudaEvent_t NcclCommunicator::Impl::leave(Watched& w) {
  cudaEvent_t done, probe;
  WMTP_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  WMTP_CUDA_CHECK(cudaEventRecord(done, stream->stream()));
  WMTP_CUDA_CHECK(cudaEventCreateWithFlags(&probe, cudaEventDisableTiming));
  WMTP_CUDA_CHECK(cudaEventRecord(probe, stream->stream()));
  w.posted(probe);
  return done;
}

namespace {

class NcclWork final : public CommWork {
 public:
  NcclWork(int device, cudaEvent_t done, std::vector<at::Tensor> keep, std::function<void()> finish)
      : device_(device), done_(done), keep_(std::move(keep)), finish_(std::move(finish)) {}
  ~NcclWork() override { wait_unless_waited(); }

 protected:
  void complete() override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    // Order the waiting thread's current stream after the collective; the host does not block.
    WMTP_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), done_, 0));
    WMTP_CUDA_CHECK(cudaEventDestroy(done_));
    if (finish_) finish_();  // avg division, on the current stream
    keep_.clear();
  }

 private:
  int device_;
  cudaEvent_t done_;
  std::vector<at::Tensor> keep_;
  std::function<void()> finish_;
};

// A CommWork that is already complete (host tensors reduced over MPI, blocking).
class DoneWork final : public CommWork {
 protected:
  void complete() override {}
};

std::string nccl_async_error(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) return "";
  if (async == ncclSuccess || async == ncclInProgress) return "";
  return ncclGetErrorString(async);
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, int device, double timeout_s) : impl_(std::make_unique<Impl>()) {
  WMTP_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  WMTP_MPI_CHECK(MPI_Comm_size(comm, &size_));
  impl_->device = device;
  impl_->cpu_comm = std::make_unique<MpiCommunicator>(comm);
  impl_->links = links_of(comm);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));

  // The watchdog first: a rank that never arrives leaves the others inside the set-up below.
  CollectiveWatchdog::Options w;
  w.who = rank_and_host() + " (cuda:" + std::to_string(device) + ")";
  w.timeout_s = timeout_s;
  w.poll_s = timeout_s > 0 ? std::min(1.0, timeout_s / 10) : 1.0;
  Impl* im = impl_.get();
  const int dev = device;
  w.async_error = [im] {
    ncclComm_t nc = im->live.load();
    return nc ? nccl_async_error(nc) : std::string();
  };
  w.on_failure = [](const std::string& msg) {
    fprintf(stderr, "wmtp: [%s] error: %s\n", rank_and_host().c_str(), msg.c_str());
    fflush(stderr);
  };
  // ncclCommAbort makes stuck NCCL kernels return, but it also frees device memory, which waits for
  // the device and so never returns when a stream is held by other work: it gets a few seconds.
  // MPI_Abort ends every rank of the job; from this thread only with MPI_THREAD_MULTIPLE. _Exit last:
  // the process ends even if both are stuck, and the launcher ends the job on a rank's exit
  // (kWatchdogExitCode, 75: the job script requeues).
  w.abort.push_back({"ncclCommAbort", [im, dev] {
                       if (ncclComm_t nc = im->live.load()) {
                         cudaSetDevice(dev);
                         ncclCommAbort(nc);
                       }
                     }});
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level == MPI_THREAD_MULTIPLE)
    w.abort.push_back({"MPI_Abort", [] { MPI_Abort(MPI_COMM_WORLD, kWatchdogExitCode); }});
  w.abort_grace_s = 5;
  w.terminate = [] { std::_Exit(kWatchdogExitCode); };
  impl_->watchdog = std::make_unique<CollectiveWatchdog>(std::move(w));
  impl_->watchdog->start();

  {
    Watched setup(*impl_->watchdog, "communicator set-up (ncclGetUniqueId, MPI_Bcast, ncclCommInitRank)");
    ncclUniqueId id;
    if (rank_ == 0) WMTP_NCCL_CHECK(ncclGetUniqueId(&id));
    WMTP_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm));
    WMTP_NCCL_CHECK(ncclCommInitRank(&impl_->comm, size_, id, rank_));
  }
  impl_->live.store(impl_->comm);
  impl_->stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, static_cast<c10::DeviceIndex>(device));
}

NcclCommunicator::~NcclCommunicator() {
  // Outstanding collectives finish before the communicator goes, with the watchdog still on: a dead
  // peer ends the job instead of hanging this destructor (and whatever exception unwinds through it).
  if (impl_->comm) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device));
    if (impl_->stream) cudaStreamSynchronize(impl_->stream->stream());
  }
  if (impl_->watchdog) impl_->watchdog->stop();
  impl_->live.store(nullptr);
  if (impl_->comm) ncclCommDestroy(impl_->comm);
  impl_->watchdog.reset();
}

CommWorkPtr NcclCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  if (in.defined() && out.defined() && in.is_cpu() && out.is_cpu()) {
    impl_->cpu_comm->all_gather(in, out);
    return std::make_unique<DoneWork>();
  }
  impl_->check_pair(in, out, "all_gather");
  WMTP_CHECK(out.numel() == in.numel() * size_, "all_gather output has ", out.numel(), " elements, expected ",
             in.numel() * size_);
  Watched watched(*impl_->watchdog, "all_gather");
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device));
  impl_->enter({in, out});
  WMTP_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), size_t(in.numel()), nccl_type(in.scalar_type()),
                                impl_->comm, impl_->stream->stream()));
  if (impl_->links) impl_->links->all_gather(in.nbytes());
  return std::make_unique<NcclWork>(impl_->device, impl_->leave(watched), std::vector<at::Tensor>{in, out}, nullptr);
}

CommWorkPtr NcclCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  if (in.defined() && out.defined() && in.is_cpu() && out.is_cpu()) {
    impl_->cpu_comm->reduce_scatter(in, out, op);
    return std::make_unique<DoneWork>();
  }
  impl_->check_pair(in, out, "reduce_scatter");
  impl_->check_avg(out, op);
  WMTP_CHECK(in.numel() == out.numel() * size_, "reduce_scatter input has ", in.numel(), " elements, expected ",
             out.numel() * size_);
  Watched watched(*impl_->watchdog, "reduce_scatter");
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device));
  impl_->enter({in, out});
  WMTP_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()), nccl_type(in.scalar_type()),
                                    nccl_op(op), impl_->comm, impl_->stream->stream()));
  if (impl_->links) impl_->links->reduce_scatter(out.nbytes());  // bf16 natively: its own bytes
  const int n = size_;
  std::function<void()> finish;
  if (op == ReduceOp::Avg) finish = [out, n]() mutable { out.div_(n); };
  return std::make_unique<NcclWork>(impl_->device, impl_->leave(watched), std::vector<at::Tensor>{in, out}, finish);
}

CommWorkPtr NcclCommunicator::all_reduce_async(const at::Tensor& t, ReduceOp op) {
  if (t.defined() && t.is_cpu()) {
    impl_->cpu_comm->all_reduce(t, op);
    return std::make_unique<DoneWork>();
  }
  impl_->check_tensor(t, "all_reduce");
  impl_->check_avg(t, op);
  Watched watched(*impl_->watchdog, "all_reduce");
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device));
  impl_->enter({t});
  WMTP_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.scalar_type()), nccl_op(op),
                                impl_->comm, impl_->stream->stream()));
  if (impl_->links) impl_->links->all_reduce(t.numel(), t.element_size());
  const int n = size_;
  std::function<void()> finish;
  if (op == ReduceOp::Avg) finish = [t, n]() mutable { t.div_(n); };
  return std::make_unique<NcclWork>(impl_->device, impl_->leave(watched), std::vector<at::Tensor>{t}, finish);
}

CommWorkPtr NcclCommunicator::broadcast_async(const at::Tensor& t, int root) {
  if (t.defined() && t.is_cpu()) {
    impl_->cpu_comm->broadcast(t, root);
    return std::make_unique<DoneWork>();
  }
  impl_->check_tensor(t, "broadcast");
  Watched watched(*impl_->watchdog, "broadcast");
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device));
  impl_->enter({t});
  WMTP_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.scalar_type()), root,
                                impl_->comm, impl_->stream->stream()));
  if (impl_->links) impl_->links->broadcast(t.nbytes(), root);
  return std::make_unique<NcclWork>(impl_->device, impl_->leave(watched), std::vector<at::Tensor>{t}, nullptr);
}

void NcclCommunicator::all_gather(const at::Tensor& in, const at::Tensor& out) { all_gather_async(in, out)->wait(); }
void NcclCommunicator::reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
  reduce_scatter_async(in, out, op)->wait();
}
void NcclCommunicator::all_reduce(const at::Tensor& t, ReduceOp op) { all_reduce_async(t, op)->wait(); }
void NcclCommunicator::broadcast(const at::Tensor& t, int root) { broadcast_async(t, root)->wait(); }

void NcclCommunicator::barrier() {
  // Every rank's queued device work first (a host-side barrier alone would not wait for it), then
  // MPI's barrier: the host threads of all ranks have reached this point.
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(impl_->device));
  WMTP_CUDA_CHECK(cudaStreamSynchronize(c10::cuda::getCurrentCUDAStream(impl_->device).stream()));
  WMTP_CUDA_CHECK(cudaStreamSynchronize(impl_->stream->stream()));
  impl_->cpu_comm->barrier();
}

}  // namespace wmtp
