// CUDA events for PhaseTimer: recorded on LibTorch's current stream, read once per log interval.
#include "core/phase_timer_cuda.h"

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "core/check.h"

namespace wmtp::phase_cuda {

void* create_event() {
  cudaEvent_t e;
  WMTP_CUDA_CHECK(cudaEventCreate(&e));  // default flags: timing enabled
  return static_cast<void*>(e);
}

void destroy_event(void* event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

void record(void* event) {
  WMTP_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), c10::cuda::getCurrentCUDAStream().stream()));
}

bool finished(void* event) {
  const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (rc == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it so later checks start clean
    return false;
  }
  WMTP_CUDA_CHECK(rc);
  return true;
}

double elapsed_seconds(void* start, void* end) {
  WMTP_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(end)));
  float ms = 0;
  WMTP_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return double(ms) / 1e3;
}

}  // namespace wmtp::phase_cuda
