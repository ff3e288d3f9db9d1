// GatherMemory: allocation and accounting of gathered (unsharded) parameter buffers. Every buffer
// the engine gathers into is allocated here with a deleter that reports its release, so the live
// and peak figures are what really exists — whoever holds the storage (the engine, autograd's saved
// tensors, an in-flight prefetch) — not what the engine believes it holds.
//
// Released CPU buffers go back to a cache and serve later gathers of (nearly) the same size, so a
// step does not page-fault fresh memory for every gather; the cache is trimmed so that live plus
// cached bytes never exceed the most ever live at once plus the largest buffer. CUDA buffers are not cached here: the CUDA
// caching allocator already reuses memory and knows which stream last used it (this cache would
// not, once collectives run on a stream of their own).
#pragma once
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace wmtp {

struct GatherCounts {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int live_units = 0;  // units with at least one gathered buffer alive
  int peak_units = 0;
  int64_t cached_bytes = 0;  // released buffers kept for reuse
  int64_t allocations = 0;   // fresh allocations (cache misses)
  int64_t reuses = 0;        // served from the cache
};

class GatherMemory : public std::enable_shared_from_this<GatherMemory> {
 public:
  explicit GatherMemory(int num_units) : per_unit_(static_cast<size_t>(num_units), 0) {}

  // `nbytes` of device memory for `unit`, counted until the returned DataPtr is destroyed (which
  // may happen on any thread, after the engine is gone).
  c10::DataPtr allocate(int unit, int64_t nbytes, c10::Device device);
  // A storage of `nbytes` from allocate().
  c10::Storage new_storage(int unit, int64_t nbytes, c10::Device device);

  GatherCounts counts() const;
  void reset_peak();  // peak := live

 private:
  friend struct GatherAllocation;
  struct Cached {
    c10::DataPtr data;
    int64_t capacity = 0;
  };
  void add(int unit, int64_t nbytes, bool reused);
  void remove(int unit, int64_t nbytes, c10::DataPtr& data);

  mutable std::mutex mu_;
  std::vector<int> per_unit_;  // live buffers per unit
  GatherCounts counts_;
  std::vector<Cached> cache_;
  int64_t high_water_ = 0;  // most live bytes ever (reset_peak leaves it): bounds live + cached
  int64_t largest_ = 0;     // largest buffer ever allocated
};

// Releases a storage's memory while every tensor (and autograd's saved views) keeps pointing at it:
// the StorageImpl stays, with no data and 0 bytes, until refill_storage() gives it memory again.
void release_storage(const c10::Storage& storage);
// Gives a released storage fresh memory of `nbytes` from `memory`, for `unit`.
void refill_storage(const c10::Storage& storage, GatherMemory& memory, int unit, int64_t nbytes);

}  // namespace wmtp
