// Named step statistics: slots by name, reduced as the layout declares, no position arithmetic.
#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include <limits>

#include "core/error.h"
#include "core/phase_timer.h"
#include "train/named_stats.h"

namespace wmtp {
namespace {

TEST(NamedStats, NamesLayOutDisjointSlotsInDeclarationOrder) {
  StatLayout l;
  l.sum("loss").sum("loss_head", 3).max("w_max").sum("count", 3).max("neg_w_min");
  EXPECT_EQ(l.sum_size(), 7u);
  EXPECT_EQ(l.max_size(), 2u);
  NamedStats st = l.make();
  st.set("loss", 1.5);
  for (size_t k = 0; k < 3; ++k) st.set("loss_head", k, 10.0 + double(k)), st.set("count", k, 20.0 + double(k));
  st.set("w_max", 0.25);
  // Every statistic reads back what was written to it, whatever was declared around it.
  EXPECT_EQ(st.get("loss"), 1.5);
  EXPECT_EQ(st.get_all("loss_head"), (std::vector<double>{10, 11, 12}));
  EXPECT_EQ(st.get_all("count"), (std::vector<double>{20, 21, 22}));
  EXPECT_EQ(st.get("w_max"), 0.25);
  // The flat storage is the declaration order: what the trainer all-reduces.
  EXPECT_EQ(st.sum, (std::vector<double>{1.5, 10, 11, 12, 20, 21, 22}));
  // A maximum nobody set is the reduction's neutral element.
  EXPECT_EQ(st.get("neg_w_min"), std::numeric_limits<double>::lowest());
}

TEST(NamedStats, AddingAStatisticMovesNothingReadByName) {
  StatLayout before, after;
  before.sum("loss").sum("count", 2);
  after.sum("loss").sum("selected", 2).sum("count", 2);
  for (const StatLayout* l : {&before, &after}) {
    NamedStats st = l->make();
    st.set("count", std::vector<double>{4, 5});
    st.set("loss", 3);
    EXPECT_EQ(st.get("count", 1), 5.0);
    EXPECT_EQ(st.get("loss"), 3.0);
  }
}

TEST(NamedStats, AccumulateSumsSumsAndMaximizesMaxima) {
  StatLayout l;
  l.sum("x", 2).max("m");
  NamedStats a = l.make(), b = l.make(), total;  // `total` starts empty, as the trainer's does
  a.set("x", {1, 2}), a.set("m", -3), a.tokens = 4;
  b.set("x", {10, 20}), b.set("m", -7), b.tokens = 5;
  total.accumulate(a);
  total.accumulate(b);
  EXPECT_EQ(total.get_all("x"), (std::vector<double>{11, 22}));
  EXPECT_EQ(total.get("m"), -3.0);
  EXPECT_EQ(total.tokens, 9.0);
}

TEST(NamedStats, DeviceValuesOfEveryMicroBatchAreReadOnceWithTheNorm) {
  StatLayout l;
  l.sum("loss").sum("x", 2).max("m", 2);
  // Three micro-batches as a step has them: some figures left as tensors, some set as doubles.
  NamedStats total;
  for (int i = 0; i < 3; ++i) {
    NamedStats mb = l.make();
    mb.set("loss", at::full({1}, 0.5 * (i + 1), at::kFloat));
    mb.set("x", at::tensor({double(i), 10.0 * i}, at::kDouble));
    mb.set("m", at::tensor({int64_t(-i), int64_t(i)}, at::kLong));
    mb.tokens = 2;
    total.accumulate(mb);
  }
  ASSERT_TRUE(total.has_pending());
  EXPECT_THROW(total.get_all("x"), Error);  // not read yet: no silent zeros
  EXPECT_EQ(total.tokens, 6.0);
  PhaseTimer timer(0, c10::Device(c10::kCPU));
  const at::Tensor norm = total.read_pending(&timer, at::full({1}, 7.25, at::kDouble));
  ASSERT_TRUE(norm.defined());
  EXPECT_EQ(norm.item<double>(), 7.25);
  EXPECT_FALSE(total.has_pending());
  EXPECT_EQ(total.get("loss"), 0.5 + 1.0 + 1.5);
  EXPECT_EQ(total.get_all("x"), (std::vector<double>{0 + 1 + 2, 0 + 10 + 20}));
  EXPECT_EQ(total.get_all("m"), (std::vector<double>{0, 2}));  // maxima of maxima
  EXPECT_EQ(total.tokens, 6.0);
  // One read of the host, counted once, however many micro-batches and statistics there were.
  int64_t reads = 0;
  for (const PhaseTotal& p : timer.take())
    if (p.phase == Phase::HostSync) reads += p.count;
  EXPECT_EQ(reads, 1);
  // A tensor of the wrong size names the statistic.
  NamedStats bad = l.make();
  EXPECT_THROW(bad.set("x", at::zeros({3}, at::kDouble)), Error);
}

TEST(NamedStats, MisuseNamesTheStatistic) {
  StatLayout l;
  l.sum("loss").sum("count", 2);
  EXPECT_THROW(l.sum("count"), Error);  // declared twice
  NamedStats st = l.make();
  try {
    st.get("cuont");
    FAIL() << "an undeclared statistic was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'cuont' is not declared"), std::string::npos) << e.what();
  }
  EXPECT_THROW(st.set("count", 2, 1.0), Error);                        // past its slots
  EXPECT_THROW(st.set("count", std::vector<double>{1, 2, 3}), Error);  // wrong length
  StatLayout other;
  other.sum("loss").sum("count", 2);
  NamedStats o = other.make();
  EXPECT_THROW(st.accumulate(o), Error);  // same sizes, another layout
}

}  // namespace
}  // namespace wmtp
