// The CUDA side of comm/device.h (defined in device_cuda.cpp, compiled with WMTP_WITH_CUDA only).
// Internal: call the device.h functions instead.
#pragma once
#ifdef WMTP_WITH_CUDA
#include <memory>
#include <string>

#include "comm/device.h"

namespace wmtp::cuda_detail {
int device_count(std::string* why);
std::string device_name(int index);
std::string device_bus_id(int index);
void set_device(int index);
void synchronize(int index);
DeviceMemory memory(int index);
std::shared_ptr<void> record_event(int index);  // a cudaEvent_t on the device's current stream
void wait_event(void* event);
void* pinned_alloc(size_t bytes);  // page-aligned host memory registered with the driver
void pinned_free(void* p);
}  // namespace wmtp::cuda_detail
#endif
