// PyRandom reproduces CPython's random module (values generated with CPython 3.11:
//   random.Random(42).getrandbits(32) x3, Random(0), Random(12345).shuffle(range(20)), ...).
#include <gtest/gtest.h>

#include <numeric>

#include "data/py_random.h"

namespace wmtp {
namespace {

TEST(PyRandom, MatchesCPythonGetrandbits) {
  PyRandom a(42);
  EXPECT_EQ(a.getrandbits(32), 2746317213u);
  EXPECT_EQ(a.getrandbits(32), 478163327u);
  EXPECT_EQ(a.getrandbits(32), 107420369u);
  PyRandom z(0);
  EXPECT_EQ(z.getrandbits(32), 3626764237u);
  EXPECT_EQ(z.getrandbits(32), 1654615998u);
}

TEST(PyRandom, MatchesCPythonShuffle) {
  PyRandom r(12345);
  std::vector<int> x(20);
  std::iota(x.begin(), x.end(), 0);
  r.shuffle(x);
  EXPECT_EQ(x, (std::vector<int>{16, 18, 3, 8, 19, 10, 7, 14, 12, 1, 5, 2, 15, 17, 4, 6, 11, 9, 0, 13}));
}

TEST(PyRandom, MatchesCPythonWideSeedsAndBounds) {
  PyRandom r((1ULL << 40) + 5);  // a seed of two 32-bit words
  EXPECT_EQ(r.randbelow(1000000000000ULL), 569101979940ULL);
  EXPECT_EQ(r.randbelow(1000000000000ULL), 727003120297ULL);
  EXPECT_EQ(r.randbelow(1000000000000ULL), 34040994016ULL);
  EXPECT_EQ(r.getrandbits(64), 13990771555713216969ULL);
  EXPECT_EQ(r.getrandbits(48), 234826555071512ULL);
  PyRandom s(7);
  EXPECT_EQ(s.randbelow(1), 0u);
  EXPECT_EQ(s.randbelow(1), 0u);
  std::vector<uint64_t> got;
  for (int i = 0; i < 5; ++i) got.push_back(s.randbelow(3));
  EXPECT_EQ(got, (std::vector<uint64_t>{1, 2, 0, 0, 2}));
}

}  // namespace
}  // namespace wmtp
