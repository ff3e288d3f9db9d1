// CUDA implementations of comm/device.h: CUDA runtime queries and LibTorch's caching allocator.
#include "comm/device_cuda.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdlib>

#include "core/check.h"
#include "core/error.h"

namespace wmtp::cuda_detail {

int device_count(std::string* why) {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    if (why) *why = std::string("the CUDA runtime reports no usable GPU: ") + cudaGetErrorString(rc);
    return 0;
  }
  if (n == 0 && why) *why = "the CUDA runtime sees no GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp p;
  WMTP_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  return p.name;
}

std::string device_bus_id(int index) {
  char id[64] = {0};
  WMTP_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof(id) - 1, index));
  return id;
}

void set_device(int index) {
  // Both the runtime's and LibTorch's notion of "current" (they are the same thread-local state).
  WMTP_CUDA_CHECK(cudaSetDevice(index));
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
}

void synchronize(int index) {
  int prev = 0;
  WMTP_CUDA_CHECK(cudaGetDevice(&prev));
  WMTP_CUDA_CHECK(cudaSetDevice(index));
  WMTP_CUDA_CHECK(cudaDeviceSynchronize());
  WMTP_CUDA_CHECK(cudaSetDevice(prev));
}

DeviceMemory memory(int index) {
  namespace alloc = c10::cuda::CUDACachingAllocator;
  // Index 0 of each StatArray is the aggregate over pools (StatType::AGGREGATE in 1.13 and 2.x).
  const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  DeviceMemory m;
  m.allocated = stats.allocated_bytes[0].current;
  m.peak_allocated = stats.allocated_bytes[0].peak;
  m.reserved = stats.reserved_bytes[0].current;
  m.peak_reserved = stats.reserved_bytes[0].peak;
  return m;
}

std::shared_ptr<void> record_event(int index) {
  cudaEvent_t ev;
  WMTP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  std::shared_ptr<void> owned(static_cast<void*>(ev), [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  WMTP_CUDA_CHECK(cudaEventRecord(ev, c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index)).stream()));
  return owned;
}

void wait_event(void* event) { WMTP_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }

void* pinned_alloc(size_t bytes) {
  const size_t page = 4096, size = (bytes + page - 1) / page * page;
  void* p = nullptr;
  if (posix_memalign(&p, page, size) != 0 || p == nullptr)
    throw_runtime("offload: cannot allocate ", size, " bytes of host memory (see the dry run's host plan per node)");
  const cudaError_t rc = cudaHostRegister(p, size, cudaHostRegisterDefault);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    std::free(p);
    throw_runtime("offload: cannot page-lock ", size, " bytes of host memory: ", cudaGetErrorString(rc),
                  " (ulimit -l, or the node's memory; see the dry run's host plan per node)");
  }
  return p;
}

void pinned_free(void* p) {
  cudaHostUnregister(p);  // nothing to report from a deleter: the memory goes back either way
  std::free(p);
}

}  // namespace wmtp::cuda_detail
