// GatherMemory: counted allocations of gathered buffers, with a bounded cache of released CPU ones.
#include "shard/gather_memory.h"

#include <c10/core/StorageImpl.h>

#include <algorithm>


namespace wmtp {

// The context behind a counted DataPtr: the real allocation and who to tell when it goes.
struct GatherAllocation {
  c10::DataPtr inner;
  std::shared_ptr<GatherMemory> owner;
  int unit;
  int64_t capacity;  // bytes of `inner` (may exceed what the storage uses when reused)

  static void destroy(void* ctx) {
    auto* a = static_cast<GatherAllocation*>(ctx);
    a->owner->remove(a->unit, a->capacity, a->inner);  // keeps `inner` in the cache or leaves it to die
    delete a;
  }
};

c10::DataPtr GatherMemory::allocate(int unit, int64_t nbytes, c10::Device device) {
  c10::DataPtr inner;
  int64_t capacity = nbytes;
  bool reused = false;
  if (device.is_cpu()) {
    std::lock_guard<std::mutex> lock(mu_);
    // Best fit among cached buffers no more than 1/8 larger than asked for.
    auto best = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it)
      if (it->capacity >= nbytes && it->capacity - nbytes <= nbytes / 8 &&
          (best == cache_.end() || it->capacity < best->capacity))
        best = it;
    if (best != cache_.end()) {
      inner = std::move(best->data);
      capacity = best->capacity;
      counts_.cached_bytes -= capacity;
      cache_.erase(best);
      reused = true;
    } else {
      // Trim, smallest buffers first: live + cached + this may not exceed the most ever live plus the
      // largest buffer (the slack lets a step whose buffers of different sizes are never all live at
      // once keep each of them), nor live + this.
      largest_ = std::max(largest_, nbytes);
      const int64_t cap = std::max(high_water_ + largest_, counts_.live_bytes + nbytes);
      std::sort(cache_.begin(), cache_.end(), [](const Cached& a, const Cached& b) { return a.capacity > b.capacity; });
      while (!cache_.empty() && counts_.live_bytes + counts_.cached_bytes + nbytes > cap) {
        counts_.cached_bytes -= cache_.back().capacity;
        cache_.pop_back();  // frees it
      }
    }
  }
  if (!reused) inner = c10::GetAllocator(device.type())->allocate(static_cast<size_t>(nbytes));
  void* data = inner.get();
  auto* a = new GatherAllocation{std::move(inner), shared_from_this(), unit, capacity};
  add(unit, capacity, reused);
  return c10::DataPtr(data, a, &GatherAllocation::destroy, device);
}

c10::Storage GatherMemory::new_storage(int unit, int64_t nbytes, c10::Device device) {
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, allocate(unit, nbytes, device),
                      /*allocator=*/nullptr, /*resizable=*/false);
}

void GatherMemory::add(int unit, int64_t nbytes, bool reused) {
  std::lock_guard<std::mutex> lock(mu_);
  if (per_unit_[static_cast<size_t>(unit)]++ == 0) counts_.live_units++;
  counts_.live_bytes += nbytes;
  counts_.peak_bytes = std::max(counts_.peak_bytes, counts_.live_bytes);
  high_water_ = std::max(high_water_, counts_.live_bytes);
  counts_.peak_units = std::max(counts_.peak_units, counts_.live_units);
  (reused ? counts_.reuses : counts_.allocations)++;
}

void GatherMemory::remove(int unit, int64_t nbytes, c10::DataPtr& data) {
  std::lock_guard<std::mutex> lock(mu_);
  if (--per_unit_[static_cast<size_t>(unit)] == 0) counts_.live_units--;
  counts_.live_bytes -= nbytes;
  if (data.device().is_cpu() && data.get() != nullptr) {
    counts_.cached_bytes += nbytes;
    cache_.push_back(Cached{std::move(data), nbytes});
  }
}

GatherCounts GatherMemory::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

void GatherMemory::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  counts_.peak_bytes = counts_.live_bytes;
  counts_.peak_units = counts_.live_units;
}

void release_storage(const c10::Storage& storage) {
  c10::StorageImpl* s = storage.unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, s->device()));
  s->set_nbytes(size_t{0});
}

void refill_storage(const c10::Storage& storage, GatherMemory& memory, int unit, int64_t nbytes) {
  c10::StorageImpl* s = storage.unsafeGetStorageImpl();
  s->set_data_ptr_noswap(memory.allocate(unit, nbytes, s->device()));
  s->set_nbytes(static_cast<size_t>(nbytes));
}

}  // namespace wmtp
