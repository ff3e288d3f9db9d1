// Content checksums that do not depend on how a tensor is split across ranks.
// "sum64": the wrapping sum over elements i of splitmix64_mix(i * kSplitMix64Gamma ^ bits_i)
// (core/hash.h), where bits_i is the little-endian integer of element i's stored bytes (4 for
// float32, 2 for bfloat16). Each rank
// sums its own flat range; an MPI sum gives the whole tensor's value, whatever the partition, so
// writers get it with one all-reduce and readers can re-check any subset of ranges.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "core/hash.h"  // fnv1a64, hex64: the fingerprints' hash

namespace wmtp {

uint64_t element_checksum(const void* data, int64_t count, int elem_bytes, int64_t first_index);
// `flat` is a contiguous tensor; its elements are global elements [first_index, first_index+numel).
uint64_t tensor_checksum(const at::Tensor& flat, int64_t first_index);

}  // namespace wmtp
