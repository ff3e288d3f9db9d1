// Verifiable weights (src/pipelines/losses/verifiable.h) against an independent double-precision
// computation written here from the spec (docs/verifiable.md): the GAE reverse scan (λ < 1 and the λ = 1 shortcut),
// EMA and batch whitening, the clamped exponential weights, the weighted MTP loss normalized by
// the global count over several micro-batches, the step metrics, and the EMA recursion over k
// optimizer steps whose sums come from every rank's micro-batches (mpirun -np 1..4), including a
// save/load round trip of its state. Sequences are ragged: different prompt and solution lengths,
// right padding, a single solution token, no padding at all, and no solution token.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "ckpt/train_state.h"
#include "core/error.h"
#include "model/mtp_loss.h"
#include "test_util.h"
#include "pipelines/losses/discounted_sum.h"
#include "pipelines/losses/verifiable.h"
#include "verifiable_reference.h"

namespace wmtp {
namespace {

constexpr int64_t kS = 16;

// One sequence of a test batch: per-position values (the critic's output, also beyond the end)
// and labels (-100 on prompt and padding).
struct Seq {
  std::vector<double> values;
  std::vector<int64_t> labels;
};

// Sequence `i` of step `step`, identical on every rank. i % 5: 0 one solution token, 1 solution up
// to the last position (no padding), 2 no solution token (a prompt cut by truncation), 3 no prompt
// (the solution starts at position 0, the only case where v_{-1} = initial_value matters), else random.
Seq make_seq(uint64_t seed, int step, int i) {
  std::mt19937_64 rng(seed * 1000003ULL + static_cast<uint64_t>(step) * 7919ULL + static_cast<uint64_t>(i));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int64_t prompt = i % 5 == 3 ? 0 : 1 + static_cast<int64_t>(rng() % 6);
  int64_t sol = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(kS - prompt));
  if (i % 5 == 0) sol = 1;
  if (i % 5 == 1) sol = kS - prompt;
  if (i % 5 == 2) sol = 0;
  Seq s;
  for (int64_t t = 0; t < kS; ++t) {
    s.values.push_back(static_cast<double>(static_cast<float>(unit(rng))));  // exactly representable in fp32
    s.labels.push_back(t >= prompt && t < prompt + sol ? static_cast<int64_t>(rng() % 11) : -100);
  }
  return s;
}

at::Tensor values_tensor(const std::vector<Seq>& b) {
  at::Tensor v = at::empty({static_cast<int64_t>(b.size()), kS}, at::kFloat);
  for (size_t i = 0; i < b.size(); ++i)
    for (int64_t t = 0; t < kS; ++t) v[i][t] = b[i].values[t];
  return v;
}
at::Tensor labels_tensor(const std::vector<Seq>& b) {
  at::Tensor l = at::empty({static_cast<int64_t>(b.size()), kS}, at::kLong);
  for (size_t i = 0; i < b.size(); ++i)
    for (int64_t t = 0; t < kS; ++t) l[i][t] = b[i].labels[t];
  return l;
}

// ---- the independent computation (verifiable_reference.h)

std::vector<double> expected_gae(const Seq& s, double lambda, double v_init) {
  return test::reference_gae(s.values, s.labels, lambda, v_init);
}

std::vector<std::vector<double>> expected_weights(const std::vector<std::vector<double>>& adv,
                                                  const std::vector<Seq>& b, double mean, double sd,
                                                  const TdWeightConfig& c) {
  std::vector<std::vector<double>> w(b.size(), std::vector<double>(kS, 0.0));
  for (size_t i = 0; i < b.size(); ++i)
    for (int64_t t = 0; t < kS; ++t)
      if (b[i].labels[t] != -100) w[i][t] = test::reference_weight(adv[i][t], mean, sd, c);
  return w;
}

TdWeightConfig config(double lambda) {
  TdWeightConfig c;
  c.td_lambda = lambda;
  c.initial_value = 0.5;
  c.beta = 0.7;
  c.weight_clip_min = 0.3;  // with whitened z and beta 0.7 both clamps are hit
  c.weight_clip_max = 2.0;
  return c;
}

std::vector<Seq> batch(uint64_t seed, int step, int n) {
  std::vector<Seq> b;
  for (int i = 0; i < n; ++i) b.push_back(make_seq(seed, step, i));
  return b;
}

TEST(VerifiableGae, MatchesReverseScanOnRaggedSequences) {
  const std::vector<Seq> b = batch(3, 0, 11);
  for (double lambda : {0.0, 0.5, 0.95, 1.0}) {
    at::Tensor adv = gae_advantage(values_tensor(b), solution_mask(labels_tensor(b)), lambda, 0.5);
    ASSERT_EQ(adv.scalar_type(), at::kDouble);
    for (size_t i = 0; i < b.size(); ++i) {
      const std::vector<double> want = expected_gae(b[i], lambda, 0.5);
      for (int64_t t = 0; t < kS; ++t)
        EXPECT_NEAR(adv[i][t].item<double>(), want[t], 1e-12) << "lambda " << lambda << " seq " << i << " t " << t;
    }
  }
}

TEST(DiscountedSum, BlockedScanEqualsTheSequentialRecurrenceAcrossManyBlocks) {
  // 3 rows of 200 positions: three whole blocks of 64 and a ragged one, so every carry is used.
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor c = at::randn({3, 200}, g, at::kDouble);
  for (double rho : {0.0, 0.5, 0.95, 1.0}) {
    const at::Tensor x = reverse_discounted_sum(c, rho);
    ASSERT_EQ(x.sizes(), c.sizes());
    for (int64_t b = 0; b < 3; ++b) {
      double next = 0;  // x_t = c_t + rho x_{t+1}, written here as the loop it replaces
      for (int64_t t = 199; t >= 0; --t) {
        next = c[b][t].item<double>() + rho * next;
        ASSERT_NEAR(x[b][t].item<double>(), next, 1e-12 * std::max(1.0, std::abs(next)))
            << "rho " << rho << " row " << b << " t " << t;
      }
    }
  }
}

TEST(VerifiableGae, ShortcutIsNotTheLimitOfTheScan) {
  // A sequence whose prompt ends at value 0.2 and whose solution values are 0.4, 0.9: λ → 1 of the
  // scan gives v_T − v_{t−1} (0.7, 0.5); the λ = 1 shortcut gives 1 − v_t (0.6, 0.1), as weighted_mtp.
  Seq s{std::vector<double>(kS, 0.0), std::vector<int64_t>(kS, -100)};
  s.values[0] = 0.2;
  s.values[1] = 0.4;
  s.values[2] = 0.9;
  s.labels[1] = s.labels[2] = 5;
  at::Tensor v = values_tensor({s}), m = solution_mask(labels_tensor({s}));
  at::Tensor near1 = gae_advantage(v, m, 1.0 - 1e-12, 0.5), one = gae_advantage(v, m, 1.0, 0.5);
  EXPECT_NEAR(near1[0][1].item<double>(), 0.9 - 0.2, 1e-6);
  EXPECT_NEAR(near1[0][2].item<double>(), 0.9 - 0.4, 1e-6);
  EXPECT_NEAR(one[0][1].item<double>(), 1.0 - 0.4, 1e-7);
  EXPECT_NEAR(one[0][2].item<double>(), 1.0 - 0.9, 1e-7);
  EXPECT_EQ(one[0][0].item<double>(), 0.0);  // prompt
}

TEST(VerifiableWeights, EmaAndBatchWhiteningMatchDoubleComputation) {
  const std::vector<Seq> b = batch(4, 1, 9);
  for (double lambda : {0.95, 1.0}) {
    const TdWeightConfig c = config(lambda);
    std::vector<std::vector<double>> adv;
    std::vector<double> valid;
    for (const Seq& s : b) {
      adv.push_back(expected_gae(s, lambda, c.initial_value));
      for (int64_t t = 0; t < kS; ++t)
        if (s.labels[t] != -100) valid.push_back(adv.back()[t]);
    }
    double mean = 0, ss = 0;
    for (double a : valid) mean += a;
    mean /= valid.size();
    for (double a : valid) ss += (a - mean) * (a - mean);
    const double unbiased = std::sqrt(ss / (valid.size() - 1));
    for (bool ema : {true, false}) {
      const WhiteningStats st{0.13, 0.21};
      TokenWeights got = verifiable_weights(values_tensor(b), labels_tensor(b), c,
                                            ema ? std::optional<WhiteningStats>(st) : std::nullopt);
      const auto want = expected_weights(adv, b, ema ? st.mean : mean, ema ? st.std : unbiased, c);
      ASSERT_EQ(got.weights.scalar_type(), at::kFloat);
      double clipped = 0, wsum = 0, ent = 0, wmin = 1e9, wmax = -1e9, vse = 0;
      for (size_t i = 0; i < b.size(); ++i)
        for (int64_t t = 0; t < kS; ++t) {
          EXPECT_NEAR(got.weights[i][t].item<double>(), want[i][t], 1e-6 * want[i][t]) << i << " " << t;
          if (b[i].labels[t] == -100) continue;
          clipped += test::reference_clipped(adv[i][t], ema ? st.mean : mean, ema ? st.std : unbiased, c);
          wsum += want[i][t];
          ent += -want[i][t] * std::log(want[i][t] + 1e-10);
          wmin = std::min(wmin, want[i][t]);
          wmax = std::max(wmax, want[i][t]);
          vse += (b[i].values[t] - 1) * (b[i].values[t] - 1);
        }
      ASSERT_GT(clipped, 0) << "the clamps must be exercised";
      const TdMetrics m = td_metrics(got.read_sums());
      const double n = static_cast<double>(valid.size());
      EXPECT_EQ(got.read_sums().count, n);
      EXPECT_NEAR(m.td_mean, mean, 1e-12);
      EXPECT_NEAR(m.td_std, unbiased, 1e-12);
      EXPECT_NEAR(m.weight_mean, wsum / n, 1e-12);
      EXPECT_NEAR(m.weight_entropy, ent / n, 1e-12);
      EXPECT_NEAR(m.weight_min, wmin, 1e-12);
      EXPECT_NEAR(m.weight_max, wmax, 1e-12);
      EXPECT_NEAR(m.clipping_ratio, clipped / n, 1e-12);
      EXPECT_NEAR(m.value_mse, vse / n, 1e-12);
    }
  }
}

TEST(VerifiableWeights, BatchStatisticsWithOneValidTokenGiveTheMask) {
  // Only sequence 0 (one solution token) and sequence 2 (none): the batch has one valid token.
  const std::vector<Seq> b = {make_seq(5, 0, 0), make_seq(5, 0, 2)};
  TokenWeights got = verifiable_weights(values_tensor(b), labels_tensor(b), config(0.95), std::nullopt);
  at::Tensor mask = solution_mask(labels_tensor(b)).to(at::kFloat);
  EXPECT_EQ(mask.sum().item<double>(), 1.0);
  EXPECT_TRUE(got.weights.equal(mask));
  EXPECT_EQ(got.read_sums().clipped, 0.0);
}

TEST(VerifiableWeights, WeightedLossOverMicroBatchesMatchesDoubleComputation) {
  // Two micro-batches of one step: position weights from the EMA statistics, per-head sums
  // normalized by the step's global counts, mean over heads with tokens (docs/model.md, "Loss").
  const int64_t K = 3, V = 11;
  const TdWeightConfig c = config(0.95);
  const WhiteningStats st{-0.02, 0.3};
  std::vector<std::vector<Seq>> micro = {batch(6, 0, 4), batch(6, 1, 3)};
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(9);
  std::vector<at::Tensor> logits;
  std::vector<double> counts(K, 0.0);
  for (const auto& mb : micro) {
    logits.push_back(at::randn({static_cast<int64_t>(mb.size()), kS, K, V}, g, at::kDouble));
    const std::vector<int64_t> n = count_valid_targets(labels_tensor(mb), K);
    for (int64_t k = 0; k < K; ++k) counts[k] += static_cast<double>(n[k]);
  }
  double got = 0;
  for (size_t j = 0; j < micro.size(); ++j) {
    TokenWeights w = verifiable_weights(values_tensor(micro[j]), labels_tensor(micro[j]), c, st);
    MtpCeSums sums = mtp_ce_sums(logits[j].to(at::kFloat), labels_tensor(micro[j]), w.weights);
    got += mtp_loss_from_sums(sums.weighted, counts).item<double>();
  }
  // Independent: per token of every head, in double, with weights computed here.
  std::vector<double> head_sum(K, 0.0), head_count(K, 0.0);
  for (size_t j = 0; j < micro.size(); ++j) {
    std::vector<std::vector<double>> adv;
    for (const Seq& s : micro[j]) adv.push_back(expected_gae(s, c.td_lambda, c.initial_value));
    const auto w = expected_weights(adv, micro[j], st.mean, st.std, c);
    at::Tensor L = logits[j].to(at::kFloat).to(at::kDouble);
    for (size_t b = 0; b < micro[j].size(); ++b)
      for (int64_t k = 1; k <= K; ++k)
        for (int64_t t = 0; t + k < kS; ++t) {
          const int64_t target = micro[j][b].labels[t + k];
          if (target == -100) continue;
          at::Tensor row = L[b][t][k - 1];
          const double lse = row.logsumexp(0).item<double>();
          head_sum[k - 1] += (lse - row[target].item<double>()) * w[b][t + k];
          head_count[k - 1] += 1;
        }
  }
  double want = 0;
  int heads = 0;
  for (int64_t k = 0; k < K; ++k)
    if (head_count[k] > 0) {
      want += head_sum[k] / head_count[k];
      ++heads;
    }
  want /= heads;
  EXPECT_EQ(head_count, counts);
  EXPECT_NEAR(got, want, 1e-5 * std::abs(want));
}

// ---- EMA over optimizer steps, sums from every rank (mpirun -np 1..4)

TEST(VerifiableEma, StepsOverRanksEqualTheRecursionOnConcatenatedGlobalBatches) {
  const int rank = test::mpi().rank(), world = test::mpi().world_size();
  constexpr int kGlobal = 12, kMicro = 1, kSteps = 6;  // 12 / (1 x world) micro-batches per rank
  for (int64_t warmup : {0, 3}) {
    TdWeightConfig c = config(0.95);
    c.td_ema_warmup_steps = warmup;
    c.td_ema_momentum = 0.25;
    TdStatsEma ema(c.td_ema_momentum, c.td_ema_warmup_steps);
    test::ReferenceEma ref;
    TdStatsEma resumed(c.td_ema_momentum, c.td_ema_warmup_steps);  // loaded from a save after step 2
    for (int step = 0; step < kSteps; ++step) {
      const std::vector<Seq> global = batch(11 + warmup, step, kGlobal);
      // this rank's items: global[rank::world], in micro-batches of kMicro
      TdSums local;
      for (int first = rank; first < kGlobal; first += world * kMicro) {
        std::vector<Seq> mb;
        std::vector<std::vector<double>> adv;
        for (int j = 0; j < kMicro; ++j) {
          mb.push_back(global[first + j * world]);
          adv.push_back(expected_gae(mb.back(), c.td_lambda, c.initial_value));
        }
        // The window's weights use the statistics from before this step's update.
        TokenWeights w = verifiable_weights(values_tensor(mb), labels_tensor(mb), c, ema.stats());
        const auto want = expected_weights(adv, mb, ref.mean, ref.sd, c);
        for (size_t i = 0; i < mb.size(); ++i)
          for (int64_t t = 0; t < kS; ++t)
            ASSERT_NEAR(w.weights[i][t].item<double>(), want[i][t], 1e-6 * want[i][t]) << "step " << step;
        local.accumulate(w.read_sums());
      }
      std::vector<double> sum, max;
      local.append_to(sum, max);
      MPI_Allreduce(MPI_IN_PLACE, sum.data(), static_cast<int>(sum.size()), MPI_DOUBLE, MPI_SUM, test::mpi().world());
      MPI_Allreduce(MPI_IN_PLACE, max.data(), static_cast<int>(max.size()), MPI_DOUBLE, MPI_MAX, test::mpi().world());
      const TdSums g = TdSums::read(sum, 0, max, 0);
      ema.update(g.adv_sum, g.adv_sumsq, g.count);
      if (step >= 2) resumed.update(g.adv_sum, g.adv_sumsq, g.count);
      if (step == 1) {
        TrainState st;
        ema.save(st, "verifiable.td_ema");
        resumed.load(TrainState::deserialize(st.serialize()), "verifiable.td_ema");
      }

      std::vector<double> valid;
      for (const Seq& s : global) {
        const std::vector<double> a = expected_gae(s, c.td_lambda, c.initial_value);
        for (int64_t t = 0; t < kS; ++t)
          if (s.labels[t] != -100) valid.push_back(a[t]);
      }
      ref.update(valid, c.td_ema_momentum, c.td_ema_warmup_steps);
      EXPECT_NEAR(ema.stats().mean, ref.mean, 1e-12) << "warmup " << warmup << " step " << step;
      EXPECT_NEAR(ema.stats().std, ref.sd, 1e-12) << "warmup " << warmup << " step " << step;
      EXPECT_EQ(ema.step_count(), ref.steps);
      if (step >= 1) {
        EXPECT_EQ(resumed.stats().mean, ema.stats().mean);
        EXPECT_EQ(resumed.stats().std, ema.stats().std);
        EXPECT_EQ(resumed.step_count(), ema.step_count());
      }
      // step metrics over the global batch
      const TdMetrics m = td_metrics(g);
      double mean = 0, ss = 0;
      for (double a : valid) mean += a;
      mean /= valid.size();
      for (double a : valid) ss += (a - mean) * (a - mean);
      EXPECT_EQ(g.count, static_cast<double>(valid.size()));
      EXPECT_NEAR(m.td_mean, mean, 1e-12);
      EXPECT_NEAR(m.td_std, std::sqrt(ss / (valid.size() - 1)), 1e-12);
    }
  }
}

TEST(VerifiableEma, EmptyStepLeavesTheEmaAndMissingStateIsAnError) {
  TdStatsEma ema(0.1, 10);
  ema.update(0, 0, 0);
  EXPECT_EQ(ema.step_count(), 0);
  EXPECT_EQ(ema.stats().mean, 0.0);
  EXPECT_EQ(ema.stats().std, 1.0);
  TrainState st;
  st.set_double("verifiable.td_ema.mean", 0.5);
  st.set_double("verifiable.td_ema.std", 0.5);
  try {
    ema.load(st, "verifiable.td_ema");
    FAIL() << "a state without step_count must not load";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("verifiable.td_ema.step_count"), std::string::npos) << e.what();
  }
}

TEST(VerifiableConfig, RejectsOutOfRangeValues) {
  TdWeightConfig c;
  EXPECT_NO_THROW(c.validate());
  for (auto bad : std::vector<std::function<void(TdWeightConfig&)>>{
           [](TdWeightConfig& x) { x.td_lambda = 1.5; }, [](TdWeightConfig& x) { x.beta = 0; },
           [](TdWeightConfig& x) { x.weight_clip_min = 0; }, [](TdWeightConfig& x) { x.weight_clip_max = 0.05; },
           [](TdWeightConfig& x) { x.td_ema_momentum = 0; }, [](TdWeightConfig& x) { x.td_ema_warmup_steps = -1; }}) {
    TdWeightConfig x;
    bad(x);
    EXPECT_THROW(x.validate(), Error);
  }
}

}  // namespace
}  // namespace wmtp
