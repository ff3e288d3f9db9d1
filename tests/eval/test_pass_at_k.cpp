// pass@k against exact fractions: 1 - C(n-c, k)/C(n, k) with the binomials as exact prime
// factorizations (Legendre's formula), for every n <= 200 on a grid of c and k.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "eval/pass_at_k.h"

namespace wmtp {
namespace {

// Exponent of prime p in m!.
int64_t legendre(int64_t m, int64_t p) {
  int64_t e = 0;
  for (int64_t q = p; q <= m; q *= p) e += m / q;
  return e;
}

// C(a, k) / C(n, k) = a! (n-k)! / ((a-k)! n!), exactly factorized, evaluated once in long double.
long double binomial_ratio(int64_t a, int64_t n, int64_t k) {
  long double v = 1.0L;
  for (int64_t p = 2; p <= n; ++p) {
    bool prime = true;
    for (int64_t d = 2; d * d <= p; ++d) prime = prime && p % d != 0;
    if (!prime) continue;
    const int64_t e = legendre(a, p) + legendre(n - k, p) - legendre(a - k, p) - legendre(n, p);
    v *= std::pow(static_cast<long double>(p), static_cast<long double>(e));
  }
  return v;
}

TEST(PassAtK, MatchesExactFractions) {
  int64_t checked = 0;
  for (int64_t n = 1; n <= 200; n += (n < 30 ? 1 : 7)) {
    for (int64_t c = 0; c <= n; c += (n < 30 ? 1 : 5)) {
      for (int64_t k : {1, 2, 5, 10, 20, 50, 100, 200}) {
        if (k > n) continue;
        const double got = pass_at_k(n, c, k);
        const double want = n - c < k ? 1.0 : static_cast<double>(1.0L - binomial_ratio(n - c, n, k));
        ASSERT_NEAR(got, want, 1e-12) << "n " << n << " c " << c << " k " << k;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000);
  EXPECT_DOUBLE_EQ(pass_at_k(200, 0, 10), 0.0);
  EXPECT_DOUBLE_EQ(pass_at_k(10, 3, 1), 0.3);  // pass@1 = c / n
  EXPECT_THROW(pass_at_k(5, 6, 1), std::exception);
}

TEST(PassAtK, KListFollowsTheSpec) {
  EXPECT_EQ(pass_at_k_list(20), (std::vector<int64_t>{1, 5, 10, 20}));
  EXPECT_EQ(pass_at_k_list(19), (std::vector<int64_t>{1, 5, 10}));
  EXPECT_EQ(pass_at_k_list(7), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(pass_at_k_list(1), (std::vector<int64_t>{1}));
}

}  // namespace
}  // namespace wmtp
