// Partition-independent element checksums (see checksum.h).
#include "ckpt/checksum.h"

#include <ATen/ATen.h>

#include <cstring>

#include "core/error.h"

namespace wmtp {

namespace {
template <class U>
uint64_t sum_elements(const U* p, int64_t count, int64_t first) {
  uint64_t s = 0;
  uint64_t idx = uint64_t(first) * kSplitMix64Gamma;
  for (int64_t i = 0; i < count; ++i, idx += kSplitMix64Gamma) s += splitmix64_mix(idx ^ uint64_t(p[i]));
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

}  // namespace wmtp
