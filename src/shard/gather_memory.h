// GatherMemory: allocation and accounting of gathered (unsharded) parameter buffers. Every buffer
// the engine gathers into is allocated here with a deleter that reports its release, so the live
// and peak figures are what really exists — whoever holds the storage (the engine, autograd's saved
// tensors, an in-flight prefetch) — not what the engine believes it holds.
#pragma once
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
  void add(int unit, int64_t nbytes);
  void remove(int unit, int64_t nbytes);

  mutable std::mutex mu_;
  std::vector<int> per_unit_;  // live buffers per unit
  GatherCounts counts_;
};

// Releases a storage's memory while every tensor (and autograd's saved views) keeps pointing at it:
// the StorageImpl stays, with no data and 0 bytes, until refill_storage() gives it memory again.
void release_storage(const c10::Storage& storage);
// Gives a released storage fresh memory of `nbytes` from `memory`, for `unit`.
void refill_storage(const c10::Storage& storage, GatherMemory& memory, int unit, int64_t nbytes);

}  // namespace wmtp
