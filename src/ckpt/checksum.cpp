// Partition-independent element checksums and FNV-1a (see checksum.h).
#include "ckpt/checksum.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace wmtp {

namespace {
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

template <class U>
uint64_t sum_elements(const U* p, int64_t count, int64_t first) {
  uint64_t s = 0;
  uint64_t idx = uint64_t(first) * 0x9E3779B97F4A7C15ULL;
  for (int64_t i = 0; i < count; ++i, idx += 0x9E3779B97F4A7C15ULL) s += mix64(idx ^ uint64_t(p[i]));
  return s;
}
}  // namespace

uint64_t element_checksum(const void* data, int64_t count, int elem_bytes, int64_t first_index) {
  switch (elem_bytes) {
    case 1: return sum_elements(static_cast<const uint8_t*>(data), count, first_index);
    case 2: return sum_elements(static_cast<const uint16_t*>(data), count, first_index);
    case 4: return sum_elements(static_cast<const uint32_t*>(data), count, first_index);
    case 8: return sum_elements(static_cast<const uint64_t*>(data), count, first_index);
  }
  throw_runtime("element_checksum: unsupported element size ", elem_bytes);
}

uint64_t tensor_checksum(const at::Tensor& flat, int64_t first_index) {
  WMTP_CHECK(flat.is_contiguous(), "tensor_checksum needs a contiguous tensor");
  return element_checksum(flat.data_ptr(), flat.numel(), int(flat.element_size()), first_index);
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace wmtp
