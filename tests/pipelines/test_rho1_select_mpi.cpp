// Global Rho-1 selection under mpirun -np 1..4 picks exactly the tokens one process picks from the
// concatenated step: every rank derives the whole step (ragged micro-batches, values with many ties,
// heads with no valid token on some or all ranks) from a seed, keeps micro-batches i % world ==
// rank (so at np 4 some ranks hold none), selects through the communicator, and compares its own
// micro-batches with a sort of everything written here. The communicator is wrapped to count
// traffic: 4 all-reduces of [K, 256] int64 per selection, nothing gathered.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "comm/mpi_communicator.h"
#include "test_util.h"
#include "pipelines/losses/rho1.h"

namespace wmtp {
namespace {

// Forwards to an MpiCommunicator and counts what goes through it.
class CountingComm final : public Communicator {
 public:
  explicit CountingComm(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string backend() const override { return inner_.backend(); }
  void all_gather(const at::Tensor& in, const at::Tensor& out) override { ++other, inner_.all_gather(in, out); }
  void reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override {
    ++other, inner_.reduce_scatter(in, out, op);
  }
  void all_reduce(const at::Tensor& t, ReduceOp op) override {
    ++all_reduces;
    elements = std::max<int64_t>(elements, t.numel());
    inner_.all_reduce(t, op);
  }
  void broadcast(const at::Tensor& t, int root) override { ++other, inner_.broadcast(t, root); }
  void barrier() override { ++other, inner_.barrier(); }
  CommWorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) override {
    return ++other, inner_.all_gather_async(in, out);
  }
  CommWorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out, ReduceOp op) override {
    return ++other, inner_.reduce_scatter_async(in, out, op);
  }
  CommWorkPtr all_reduce_async(const at::Tensor& t, ReduceOp op) override {
    return ++other, inner_.all_reduce_async(t, op);
  }
  CommWorkPtr broadcast_async(const at::Tensor& t, int root) override {
    return ++other, inner_.broadcast_async(t, root);
  }
  int all_reduces = 0, other = 0;
  int64_t elements = 0;

 private:
  Communicator& inner_;
};

MpiCommunicator& world() {
  static MpiCommunicator comm(test::mpi().world());
  return comm;
}

// Micro-batch i of the step: shape and values from (seed, i) only.
Rho1Excess step_micro_batch(uint64_t seed, int i, int64_t K, bool last_head_empty) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed * 1000 + uint64_t(i));
  const int64_t B = 1 + i % 3, S = 4 + (7 * i) % 11;
  Rho1Excess e;
  e.excess = at::randint(-8, 9, {B, S, K}, g).to(at::kFloat) * 0.125;  // 17 distinct values: many ties
  e.excess.select(2, 0).add_(at::randn({B, S}, g) * 1e-3);             // head 0 mostly distinct
  e.valid = at::rand({B, S, K}, g).gt(0.3);
  if (i % 4 == 1) e.valid.select(2, 1).fill_(false);  // a head empty on this micro-batch
  if (last_head_empty) e.valid.select(2, K - 1).fill_(false);
  e.excess = at::where(e.valid, e.excess, at::zeros({}, e.excess.options()));
  return e;
}

struct Scenario {
  uint64_t seed;
  int micro_batches;
  int64_t K;
  double p;
  bool last_head_empty;
};

TEST(Rho1GlobalSelection, EveryRankPicksWhatOneProcessPicksOnTheConcatenatedStep) {
  const int rank = world().rank(), size = world().size();
  int straddled = 0;  // heads where ties at the threshold made the selection larger than keep
  const std::vector<Scenario> scenarios = {{1, 3, 4, 0.7, false},  // fewer micro-batches than ranks at np 4
                                           {2, 9, 3, 0.7, false},
                                           {3, 8, 4, 0.6, true},
                                           {4, 6, 2, 1.0, false},
                                           {5, 7, 3, 0.05, false}};
  for (const Scenario& sc : scenarios) {
    std::vector<Rho1Excess> all, mine;
    for (int i = 0; i < sc.micro_batches; ++i) {
      all.push_back(step_micro_batch(sc.seed, i, sc.K, sc.last_head_empty));
      if (i % size == rank) mine.push_back(all.back());
    }
    CountingComm comm(world());
    Rho1Selection sel = rho1_select_global(mine, sc.K, sc.p, &comm);
    EXPECT_EQ(comm.all_reduces, 4) << "seed " << sc.seed;
    EXPECT_EQ(comm.other, 0);
    EXPECT_EQ(comm.elements, sc.K * 256);
    ASSERT_EQ(sel.weights.size(), mine.size());
    const std::vector<Rho1HeadSelection> heads = sel.read_heads();

    for (int64_t k = 0; k < sc.K; ++k) {
      // One process: every valid value of the step, sorted; the keep-th largest; ties kept.
      std::vector<double> values;
      for (const auto& m : all) {
        at::Tensor ex = m.excess.select(2, k).reshape({-1}), va = m.valid.select(2, k).reshape({-1});
        for (int64_t j = 0; j < ex.numel(); ++j)
          if (va[j].item<bool>()) values.push_back(ex[j].item<double>());
      }
      std::sort(values.begin(), values.end(), std::greater<double>());
      const int64_t n = int64_t(values.size());
      const int64_t keep = n ? 1 + int64_t(std::floor(sc.p * double(n - 1) + 1e-9)) : 0;
      const double thr = keep ? values[size_t(keep - 1)] : std::numeric_limits<double>::infinity();
      const int64_t selected = std::count_if(values.begin(), values.end(), [&](double v) { return v >= thr; });
      const std::string what = "seed " + std::to_string(sc.seed) + " head " + std::to_string(k);
      EXPECT_EQ(heads[k].n_valid, n) << what;
      EXPECT_EQ(heads[k].keep, keep) << what;
      EXPECT_EQ(heads[k].selected, selected) << what;
      if (keep) {
        EXPECT_EQ(heads[k].threshold, thr) << what;
      }
      if (sc.last_head_empty && k == sc.K - 1) {
        EXPECT_EQ(n, 0);
      }
      straddled += selected > keep;
      for (size_t i = 0; i < mine.size(); ++i) {
        at::Tensor expect =
            mine[i].valid.select(2, k).logical_and(mine[i].excess.select(2, k).to(at::kDouble).ge(thr)).to(at::kFloat);
        EXPECT_TRUE(sel.weights[i].select(2, k).equal(expect)) << what << " local micro-batch " << i;
      }
    }
  }
  EXPECT_GE(straddled, 3) << "the data must exercise the tie rule";
}

}  // namespace
}  // namespace wmtp
