// core/hash.h against the published test vectors of FNV-1a 64 (Fowler/Noll/Vo's list) and SplitMix64
// (Vigna's splitmix64.c from state 0): a fingerprint or a random stream stored in a checkpoint or a
// dataset must never change.
#include <gtest/gtest.h>

#include <string>

#include "core/hash.h"

namespace wmtp {
namespace {

TEST(Hash, Fnv1a64MatchesPublishedVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(Fnv1a64().add("foo").add("bar").value(), fnv1a64("foobar"));  // fed in pieces: the same
}

TEST(Hash, Fnv1a64AddsIntegersLeastSignificantByteFirst) {
  const std::string le("\x08\x07\x06\x05\x04\x03\x02\x01", 8);
  EXPECT_EQ(Fnv1a64().add_u64(0x0102030405060708ULL).value(), fnv1a64(le));
}

TEST(Hash, SplitMix64MatchesReferenceStream) {
  uint64_t state = 0;
  const uint64_t want[] = {0xe220a8397b1dcdafULL, 0x6e789e6aa1b965f4ULL, 0x06c45d188009454fULL};
  for (uint64_t w : want) EXPECT_EQ(splitmix64_mix(state += kSplitMix64Gamma), w);
  EXPECT_EQ(splitmix64(0), want[0]);
}

TEST(Hash, Hex64IsSixteenLowerCaseDigits) {
  EXPECT_EQ(hex64(0xABCULL), "0000000000000abc");
  EXPECT_EQ(hex64(~0ULL), "ffffffffffffffff");
}

}  // namespace
}  // namespace wmtp
