// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing, and the
// "masked" form TFRecord stores so that a CRC computed over data that itself holds CRCs stays strong.
#pragma once
#include <cstddef>
#include <cstdint>

namespace wmtp {

uint32_t crc32c(const void* data, size_t n);
// ((crc >> 15) | (crc << 17)) + 0xa282ead8, as TensorFlow's crc32c::Mask.
uint32_t mask_crc32c(uint32_t crc);

}  // namespace wmtp
