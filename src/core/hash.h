// The 64-bit hashes every area shares, each written once: FNV-1a (fingerprints of names, files, sample
// orders and checkpoint contents) and SplitMix64 (counter-based random streams: parameter init,
// sampling; the element checksums of ckpt/checksum.h). Their outputs are stored in checkpoints and
// datasets, so they never change.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace wmtp {

// 64-bit FNV-1a, fed byte by byte.
class Fnv1a64 {
 public:
  Fnv1a64& add(std::string_view bytes) {
    for (unsigned char c : bytes) h_ = (h_ ^ c) * kPrime;
    return *this;
  }
  // `v`'s 8 bytes, least significant first (the same on every host).
  Fnv1a64& add_u64(uint64_t v) {
    for (int b = 0; b < 8; ++b) h_ = (h_ ^ ((v >> (8 * b)) & 0xff)) * kPrime;
    return *this;
  }
  uint64_t value() const { return h_; }

 private:
  static constexpr uint64_t kPrime = 0x100000001b3ULL;
  uint64_t h_ = 0xcbf29ce484222325ULL;  // the offset basis
};

inline uint64_t fnv1a64(std::string_view bytes) { return Fnv1a64().add(bytes).value(); }

// SplitMix64: the state advances by kSplitMix64Gamma and each output is splitmix64_mix of the state.
inline constexpr uint64_t kSplitMix64Gamma = 0x9E3779B97F4A7C15ULL;
inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
// The first output of the stream whose state is `state`.
inline uint64_t splitmix64(uint64_t state) { return splitmix64_mix(state + kSplitMix64Gamma); }

// 16 lower-case hex digits.
inline std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace wmtp
