// Progress text: amounts, percentage, rate and eta from the figures given.
#include <gtest/gtest.h>

#include "core/progress.h"

namespace wmtp {
namespace {

TEST(Progress, DescribesAmountRateAndEta) {
  EXPECT_EQ(Progress::describe(25'000'000, 100'000'000, Progress::Unit::Bytes, 5.0),
            "25.0 MB of 100.0 MB (25%), 5.0 MB/s, eta 15s");
  EXPECT_EQ(Progress::describe(3'000'000'000, 12'000'000'000, Progress::Unit::Bytes, 60.0),
            "3.00 GB of 12.00 GB (25%), 50.0 MB/s, eta 3m00s");
  EXPECT_EQ(Progress::describe(30, 120, Progress::Unit::Items, 10.0), "30 of 120 (25%), 3 items/s, eta 30s");
  EXPECT_EQ(Progress::describe(0, 10, Progress::Unit::Items, 0.0), "0 of 10 (0%), 0 items/s, eta ?");
}

}  // namespace
}  // namespace wmtp
