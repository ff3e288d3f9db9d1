// CountingCpuAllocator: counts every CPU allocation until its DataPtr dies.
#include "counting_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <cstring>

namespace wmtp::test {

namespace {
CountingCpuAllocator* g_counter = nullptr;
}

CountingCpuAllocator& CountingCpuAllocator::install() {
  static CountingCpuAllocator* counter = [] {
    g_counter = new CountingCpuAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(g_counter, /*priority=*/100);
    return g_counter;
  }();
  return *counter;
}

c10::DataPtr CountingCpuAllocator::allocate(size_t n) const {
  c10::DataPtr inner = inner_->allocate(n);
  void* data = inner.get();
  if (data == nullptr) return inner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.emplace(data, std::make_pair(std::move(inner), static_cast<int64_t>(n)));
    const int64_t now = live_.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
    if (now > peak_.load()) {
      peak_.store(now);
      if (track_peak_) {
        at_peak_.clear();
        for (const auto& [p, b] : blocks_) at_peak_[b.second]++;
      }
    }
  }
  return c10::DataPtr(data, data, &CountingCpuAllocator::release, c10::Device(c10::kCPU));
}

c10::DataPtr CountingCpuAllocator::allocate(size_t n) {
  return static_cast<const CountingCpuAllocator*>(this)->allocate(n);
}

void CountingCpuAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

void CountingCpuAllocator::release(void* ptr) {
  c10::DataPtr inner;
  {
    std::lock_guard<std::mutex> lock(g_counter->mu_);
    auto it = g_counter->blocks_.find(ptr);
    if (it == g_counter->blocks_.end()) return;
    inner = std::move(it->second.first);
    g_counter->live_.fetch_sub(it->second.second);
    g_counter->blocks_.erase(it);
  }
}  // `inner` frees the memory here, outside the lock

std::map<int64_t, int> CountingCpuAllocator::live_sizes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int64_t, int> out;
  for (const auto& [p, b] : blocks_) out[b.second]++;
  return out;
}

}  // namespace wmtp::test
