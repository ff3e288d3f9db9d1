// GatherMemory: counted allocations whose deleter reports back through a shared_ptr, so a buffer
// that outlives the engine (held by a graph) still releases cleanly.
#include "shard/gather_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>

namespace wmtp {

// The context behind a counted DataPtr: the real allocation and who to tell when it goes.
struct GatherAllocation {
  c10::DataPtr inner;
  std::shared_ptr<GatherMemory> owner;
  int unit;
  int64_t nbytes;

  static void destroy(void* ctx) {
    auto* a = static_cast<GatherAllocation*>(ctx);
    a->owner->remove(a->unit, a->nbytes);
    delete a;  // frees `inner`
  }
};

c10::DataPtr GatherMemory::allocate(int unit, int64_t nbytes, c10::Device device) {
  auto* a = new GatherAllocation{c10::GetAllocator(device.type())->allocate(static_cast<size_t>(nbytes)),
                                 shared_from_this(), unit, nbytes};
  void* data = a->inner.get();
  add(unit, nbytes);
  return c10::DataPtr(data, a, &GatherAllocation::destroy, device);
}

c10::Storage GatherMemory::new_storage(int unit, int64_t nbytes, c10::Device device) {
  return c10::Storage(c10::Storage::use_byte_size_t(), nbytes, allocate(unit, nbytes, device),
                      /*allocator=*/nullptr, /*resizable=*/false);
}

void GatherMemory::add(int unit, int64_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (per_unit_[static_cast<size_t>(unit)]++ == 0) counts_.live_units++;
  counts_.live_bytes += nbytes;
  counts_.peak_bytes = std::max(counts_.peak_bytes, counts_.live_bytes);
  counts_.peak_units = std::max(counts_.peak_units, counts_.live_units);
}

void GatherMemory::remove(int unit, int64_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (--per_unit_[static_cast<size_t>(unit)] == 0) counts_.live_units--;
  counts_.live_bytes -= nbytes;
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
