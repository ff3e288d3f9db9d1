// MT19937 with CPython's seeding and bounded sampling (Modules/_randommodule.c, Lib/random.py).
#include "data/py_random.h"

#include "core/error.h"

namespace wmtp {

namespace {
constexpr int N = 624, M = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU, kUpper = 0x80000000U, kLower = 0x7fffffffU;
}  // namespace

PyRandom::PyRandom(uint64_t seed) {
  std::vector<uint32_t> key;
  while (seed) {
    key.push_back(static_cast<uint32_t>(seed & 0xffffffffU));
    seed >>= 32;
  }
  if (key.empty()) key.push_back(0);  // CPython seeds 0 with the key [0]
  init_by_array(key);
}

PyRandom::PyRandom(const std::vector<uint32_t>& key) { init_by_array(key.empty() ? std::vector<uint32_t>{0} : key); }

void PyRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < N; ++i) mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  mti_ = N;
}

void PyRandom::init_by_array(const std::vector<uint32_t>& key) {
  init_genrand(19650218U);
  int i = 1;
  size_t j = 0;
  const size_t len = key.size();
  for (size_t k = (N > len ? N : len); k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= N) {
      mt_[0] = mt_[N - 1];
      i = 1;
    }
    if (j >= len) j = 0;
  }
  for (int k = N - 1; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= N) {
      mt_[0] = mt_[N - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;
  mti_ = N;
}

uint32_t PyRandom::next_u32() {
  if (mti_ >= N) {
    int kk = 0;
    auto mix = [](uint32_t a, uint32_t b) { return (a & kUpper) | (b & kLower); };
    for (; kk < N - M; ++kk) {
      uint32_t y = mix(mt_[kk], mt_[kk + 1]);
      mt_[kk] = mt_[kk + M] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    for (; kk < N - 1; ++kk) {
      uint32_t y = mix(mt_[kk], mt_[kk + 1]);
      mt_[kk] = mt_[kk + (M - N)] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    uint32_t y = mix(mt_[N - 1], mt_[0]);
    mt_[N - 1] = mt_[M - 1] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    mti_ = 0;
  }
  uint32_t y = mt_[mti_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

uint64_t PyRandom::getrandbits(int k) {
  WMTP_CHECK(k > 0 && k <= 64, "getrandbits(", k, ")");
  if (k <= 32) return next_u32() >> (32 - k);
  // CPython fills 32-bit words from the least significant one; the last word keeps its top bits.
  uint64_t lo = next_u32();
  uint64_t hi = next_u32() >> (64 - k);
  return lo | (hi << 32);
}

uint64_t PyRandom::randbelow(uint64_t n) {
  WMTP_CHECK(n > 0, "randbelow(0)");
  int k = 0;
  for (uint64_t x = n; x; x >>= 1) ++k;  // n.bit_length()
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

}  // namespace wmtp
