// Device services in a form every translation unit can use without CUDA headers: how many GPUs this
// process sees and what they are, making one current, synchronizing, moving host data up through
// pinned memory, host buffers for staging device data, and the caching allocator's memory figures.
// In a CPU-only build (no WMTP_WITH_CUDA) the CUDA queries report no GPU and the CPU paths are the
// identity; with CUDA, device_cuda.cpp implements them (c10::cuda, the CUDA runtime).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

namespace wmtp {

bool built_with_cuda();

// GPUs this process can see (CUDA_VISIBLE_DEVICES applies). 0 in a CPU-only build or when the
// driver reports none; then `why` (if given) says why ("built without CUDA", the CUDA error).
int cuda_device_count(std::string* why = nullptr);

// "NVIDIA H100 80GB HBM3" for a GPU; "cpu" for the CPU.
std::string device_name(c10::Device d);
// PCI bus id ("0000:3b:00.0") of a GPU: the same physical GPU has the same id in every process,
// whatever CUDA_VISIBLE_DEVICES renumbered. "" for the CPU.
std::string device_bus_id(c10::Device d);

// Makes `d` this thread's current device (CUDA); no-op for the CPU.
void use_device(c10::Device d);
// Waits for all work queued on `d` (CUDA); no-op for the CPU.
void synchronize(c10::Device d);

// A host tensor on `d`: for a GPU, copied from pinned memory with a non-blocking copy ordered on
// the current stream (the host returns at once; the caching host allocator keeps the pinned block
// until the copy is done). For the CPU, `host` itself.
at::Tensor to_device(const at::Tensor& host, c10::Device d);

// An uninitialized host buffer to stage data of device `d` through: pinned (page-locked, so device
// copies are DMA and may be asynchronous) when `d` is a GPU, ordinary memory otherwise.
at::Tensor host_staging_buffer(at::IntArrayRef sizes, at::ScalarType dtype, c10::Device d);

// An uninitialized 1-D host tensor for state that lives on the host while `d` computes (offload):
// page-locked when `d` is a GPU — registered with the driver at its exact size, whereas pinned
// tensors from LibTorch's caching host allocator round every block up to a power of two (+60 % on a
// 7B model's 0.8 GiB units) — ordinary memory for the CPU.
at::Tensor pinned_host_empty(int64_t numel, at::ScalarType dtype, c10::Device d);

// Physical memory of this machine (bytes), 0 when unknown.
int64_t host_memory_bytes();

// A point in a device's current stream that the host can wait for: record() after queueing
// asynchronous copies, wait() before touching their results on the host. Always reached on the CPU.
class StreamFence {
 public:
  static StreamFence record(c10::Device d);
  void wait() const;

 private:
  std::shared_ptr<void> event_;  // the CUDA event (device_cuda.cpp); null on the CPU
};

// The caching allocator's view of a GPU, in bytes: allocated = held by tensors; reserved = taken
// from the driver (allocated + cached). Peaks since start. All 0 for the CPU.
struct DeviceMemory {
  int64_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
};
DeviceMemory device_memory(c10::Device d);

}  // namespace wmtp
