// CountingCpuAllocator: LibTorch's CPU allocator with live and peak byte counts — on the CPU what
// the CUDA caching allocator's "allocated" figures are on a GPU — so a test can measure what a
// training step really allocates (saved activations, loss buffers, transients) and hold the dry
// run's per-kind estimate to it.
#pragma once
#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

namespace wmtp::test {

class CountingCpuAllocator final : public c10::Allocator {
 public:
  // Installs the counter as the process's CPU allocator (once; later calls return it). Tensors
  // allocated before keep their own deleters and are not counted.
  static CountingCpuAllocator& install();

  // Both signatures: LibTorch 1.x declares allocate() const, 2.3+ non-const (and copy_data).
  c10::DataPtr allocate(size_t n) const;
  c10::DataPtr allocate(size_t n);
  void copy_data(void* dest, const void* src, std::size_t count) const;
  // Data pointer == context (some kernels allocate through raw_allocate(), which requires it).
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  int64_t live() const { return live_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_.store(live_.load());
    at_peak_.clear();
    track_peak_ = true;
  }
  // Live allocations by size (bytes -> count): what is alive, for a failing test's message.
  std::map<int64_t, int> live_sizes() const;
  // The same at the peak since reset_peak(): what was alive when the most was.
  std::map<int64_t, int> peak_sizes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return at_peak_;
  }

 private:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}
  static void release(void* ptr);

  c10::Allocator* inner_;
  mutable std::atomic<int64_t> live_{0}, peak_{0};
  mutable std::mutex mu_;
  mutable std::unordered_map<void*, std::pair<c10::DataPtr, int64_t>> blocks_;
  mutable std::map<int64_t, int> at_peak_;
  bool track_peak_ = false;
};

}  // namespace wmtp::test
