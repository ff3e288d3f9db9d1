// Device services: CPU paths here, GPU paths forwarded to device_cuda.cpp (WMTP_WITH_CUDA only).
#include "comm/device.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include "core/error.h"
#include "comm/device_cuda.h"

namespace wmtp {

bool built_with_cuda() {
#ifdef WMTP_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count(std::string* why) {
#ifdef WMTP_WITH_CUDA
  return cuda_detail::device_count(why);
#else
  if (why) *why = "this wmtp was built without CUDA (a CPU LibTorch)";
  return 0;
#endif
}

#ifndef WMTP_WITH_CUDA
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw_runtime(what, ": this wmtp was built without CUDA; rebuild against a CUDA LibTorch (docs/gpu.md)");
}
}  // namespace
#endif

std::string device_name(c10::Device d) {
  if (d.is_cpu()) return "cpu";
#ifdef WMTP_WITH_CUDA
  return cuda_detail::device_name(d.index());
#else
  no_cuda("device_name");
#endif
}

std::string device_bus_id(c10::Device d) {
  if (d.is_cpu()) return "";
#ifdef WMTP_WITH_CUDA
  return cuda_detail::device_bus_id(d.index());
#else
  no_cuda("device_bus_id");
#endif
}

void use_device(c10::Device d) {
  if (d.is_cpu()) return;
#ifdef WMTP_WITH_CUDA
  cuda_detail::set_device(d.index());
#else
  no_cuda("use_device");
#endif
}

void synchronize(c10::Device d) {
  if (d.is_cpu()) return;
#ifdef WMTP_WITH_CUDA
  cuda_detail::synchronize(d.index());
#else
  no_cuda("synchronize");
#endif
}

at::Tensor to_device(const at::Tensor& host, c10::Device d) {
  if (d.is_cpu() || !host.defined()) return host;
  if (!host.device().is_cpu()) return host.to(d);
  at::Tensor src = host.is_pinned() ? host : host.contiguous().pin_memory();
  return src.to(d, /*non_blocking=*/true);
}

at::Tensor host_staging_buffer(at::IntArrayRef sizes, at::ScalarType dtype, c10::Device d) {
  at::TensorOptions opt = at::TensorOptions().dtype(dtype).device(at::kCPU);
  if (!d.is_cpu()) opt = opt.pinned_memory(true);
  return at::empty(sizes, opt);
}

at::Tensor pinned_host_empty(int64_t numel, at::ScalarType dtype, c10::Device d) {
  if (d.is_cpu() || numel == 0) return at::empty({numel}, at::TensorOptions().dtype(dtype));
#ifdef WMTP_WITH_CUDA
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  void* p = cuda_detail::pinned_alloc(bytes);
  return at::from_blob(
      p, {numel}, [](void* q) { cuda_detail::pinned_free(q); }, at::TensorOptions().dtype(dtype));
#else
  no_cuda("pinned_host_empty");
#endif
}

int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

StreamFence StreamFence::record(c10::Device d) {
  StreamFence f;
  if (d.is_cpu()) return f;
#ifdef WMTP_WITH_CUDA
  f.event_ = cuda_detail::record_event(d.index());
  return f;
#else
  no_cuda("StreamFence::record");
#endif
}

void StreamFence::wait() const {
#ifdef WMTP_WITH_CUDA
  if (event_) cuda_detail::wait_event(event_.get());
#endif
}

DeviceMemory device_memory(c10::Device d) {
  if (d.is_cpu()) return {};
#ifdef WMTP_WITH_CUDA
  return cuda_detail::memory(d.index());
#else
  no_cuda("device_memory");
#endif
}

}  // namespace wmtp
