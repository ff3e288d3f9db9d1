// PyRandom: CPython's `random.Random` for the parts weighted_mtp's sampling uses — seed(int)
// (init_by_array over the integer's 32-bit words), getrandbits, _randbelow and shuffle — so that the
// same seed over the same metadata gives the same permutation as the Python original. Mersenne
// Twister MT19937 with CPython's seeding; shuffle is Fisher-Yates from the end, as CPython 3.x.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace wmtp {

class PyRandom {
 public:
  explicit PyRandom(uint64_t seed);                     // random.seed(seed) for seed >= 0
  explicit PyRandom(const std::vector<uint32_t>& key);  // init_by_array(key) directly

  uint32_t next_u32();             // genrand_uint32
  uint64_t getrandbits(int k);     // 0 < k <= 64
  uint64_t randbelow(uint64_t n);  // uniform in [0, n), n > 0; rejection sampling as CPython

  template <class T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i-- > 1;) std::swap(v[i], v[static_cast<std::size_t>(randbelow(i + 1))]);
  }

 private:
  void init_genrand(uint32_t s);
  void init_by_array(const std::vector<uint32_t>& key);
  std::array<uint32_t, 624> mt_{};
  int mti_ = 625;
};

}  // namespace wmtp
