// The run's micro-batch source (train/micro_batches.h) on the tiny datasets at np 1-3: a validation
// pass yields ceil(n / world) micro-batches of one item on every rank — this rank's items
// items[rank::world] in order, then fillers (MicroBatch like any other: filler = true, one row, no
// label, host copy kept) — pointwise and pairwise; a rank making a filler joins the read agreement
// (otherwise the ranks' all-reduces pair up wrongly and the check after the pass fails or hangs).
// Training steps yield accumulation micro-batches holding exactly the step's items of this rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <ATen/ATen.h>

#include "comm/mpi_env.h"
#include "core/labels.h"
#include "data/data_config.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "test_util.h"
#include "train/micro_batches.h"

namespace wmtp::test {
namespace {

std::string tiny_dataset(const std::string& split) { return std::string(WMTP_TINY_DATA_DIR) + "/" + split + ".h5"; }

std::vector<int64_t> rows(const std::vector<DataItem>& items, bool neg) {
  std::vector<int64_t> out;
  for (const DataItem& it : items) out.push_back(neg ? it.neg : it.pos);
  return out;
}

MicroBatchOptions options(const Dataset& ds, const DataConfig& cfg) {
  MicroBatchOptions o;
  o.collate = CollateOptions::from(cfg, ds.header());
  o.pairwise = cfg.pairwise;
  o.comm = mpi().world();
  return o;
}

void check_validation_pass(bool pairwise) {
  const int rank = mpi().rank(), world = mpi().world_size();
  DataConfig cfg;
  cfg.pairwise = pairwise;
  cfg.val_n_samples = 5;  // uneven at np 2 and 3: rank 1 (np 2) and ranks 1-2 (np 3) end with fillers
  Dataset ds = Dataset::open(tiny_dataset("valid"));
  Sampler sampler(ds.metadata(), cfg, Split::Valid);
  ASSERT_EQ(sampler.size(), 5);
  BatchGeometry geo;
  geo.global_batch_size = world;
  geo.micro_batch_size = 1;
  geo.world_size = world;
  geo.rank = rank;
  MicroBatchSource source(ds, sampler, geo, options(ds, cfg));

  std::vector<DataItem> mine;  // items[rank::world]
  for (int64_t i = rank; i < sampler.size(); i += world) mine.push_back(sampler.items()[size_t(i)]);
  const int64_t expected = (5 + world - 1) / world;
  MicroBatchSource::Pass pass = source.pass();
  EXPECT_EQ(pass.size(), expected);
  int64_t n = 0;
  while (std::optional<MicroBatch> mb = pass.next()) {
    const bool real = n < int64_t(mine.size());
    EXPECT_EQ(mb->filler, !real) << "micro-batch " << n;
    ASSERT_TRUE(mb->batch.tokens.defined() && mb->cpu_batch.labels.defined()) << "micro-batch " << n;
    EXPECT_EQ(mb->neg.tokens.defined(), pairwise);
    if (real) {
      const std::vector<DataItem> item{mine[size_t(n)]};
      EXPECT_EQ(mb->batch.sample_index, rows(item, false));
      if (pairwise) {
        EXPECT_EQ(mb->neg.sample_index, rows(item, true));
      }
      EXPECT_GT(mb->cpu_batch.labels.ne(kIgnoreIndex).sum().item<int64_t>(), 0);
    } else {
      EXPECT_EQ(mb->batch.tokens.size(0), 1);
      EXPECT_TRUE(mb->batch.labels.eq(kIgnoreIndex).all().item<bool>());
      EXPECT_TRUE(mb->cpu_batch.labels.eq(kIgnoreIndex).all().item<bool>());
      EXPECT_EQ(mb->batch.attention_mask.sum().item<int64_t>(), 0);
      if (pairwise) {
        EXPECT_TRUE(mb->neg.labels.eq(kIgnoreIndex).all().item<bool>());
      }
    }
    ++n;
  }
  EXPECT_EQ(n, expected);
  // Every rank made as many agreements as the others: this all-reduce meets its peers'.
  int one = 1, ranks = 0;
  MPI_Allreduce(&one, &ranks, 1, MPI_INT, MPI_SUM, mpi().world());
  EXPECT_EQ(ranks, world);
}

TEST(MicroBatchSource, ValidationPassPadsWithFillersPointwise) { check_validation_pass(false); }
TEST(MicroBatchSource, ValidationPassPadsWithFillersPairwise) { check_validation_pass(true); }

TEST(MicroBatchSource, TrainingStepsHoldTheStepsItemsOfThisRank) {
  const int rank = mpi().rank(), world = mpi().world_size();
  DataConfig cfg;
  Dataset ds = Dataset::open(tiny_dataset("train"));
  Sampler sampler(ds.metadata(), cfg, Split::Train);
  BatchGeometry geo;
  geo.global_batch_size = 6;  // accumulation 6/3/2 at np 1/2/3
  geo.micro_batch_size = 1;
  geo.world_size = world;
  geo.rank = rank;
  MicroBatchSource source(ds, sampler, geo, options(ds, cfg));
  MicroBatchSource::Stream steps = source.stream(DataCursor{});
  for (int s = 0; s < 3; ++s) {
    const std::vector<DataItem> global = sampler.global_step_items(s, geo.global_batch_size);
    MicroBatchSource::GlobalBatch st = steps.next();
    EXPECT_EQ(st.items.global, global) << "step " << s;
    ASSERT_EQ(int64_t(st.micro_batches.size()), 6 / world) << "step " << s;
    for (size_t m = 0; m < st.micro_batches.size(); ++m) {
      const MicroBatch& mb = st.micro_batches[m];
      EXPECT_FALSE(mb.filler);
      // global[rank::world], one item per micro-batch
      EXPECT_EQ(mb.batch.sample_index, std::vector<int64_t>{global[size_t(rank) + m * size_t(world)].pos})
          << "step " << s;
      EXPECT_TRUE(mb.cpu_batch.tokens.equal(mb.batch.tokens));
    }
    EXPECT_EQ(steps.cursor(), sampler.cursor_of_step(s + 1, geo.global_batch_size));
  }
}

}  // namespace
}  // namespace wmtp::test
