// Rho-1 maths against computations written here from the spec (docs/rho1.md):
//   - the order-preserving integer keys sort like the floats;
//   - keep(n) equals integer arithmetic on k_percent written as a fraction;
//   - local selection equals an interpolated quantile written here (ties, ragged micro-batches,
//     heads without valid tokens);
//   - global selection (one process) equals the top keep(n) of the concatenated step, ties kept;
//     on one micro-batch of distinct values it equals the local rule;
//   - the excess loss of real tiny models (policy K = 3, next-token reference) equals a double
//     computation from full logits, for the three modes;
//   - the selected-token loss and every gradient over two micro-batches equal a double-precision
//     model, selection and loss written here, for the three modes x both normalizations.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../model/model_test_util.h"
#include "model/local_params.h"
#include "model/mtp_loss.h"
#include "model/mtp_pass.h"
#include "pipelines/losses/rho1.h"
#include "reference_ce.h"
#include "rel_diff.h"

namespace wmtp {
namespace {

ExcessMode mode_of(const std::string& name) {  // the [rho1] mode names
  return name == "signed" ? ExcessMode::Signed : name == "absolute" ? ExcessMode::Absolute : ExcessMode::Difficult;
}


at::Generator gen(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// A micro-batch of synthetic excesses: values from a small set (many ties), a random valid mask
// that also leaves whole heads empty now and then.
Rho1Excess synthetic(int64_t B, int64_t S, int64_t K, uint64_t seed, bool distinct = false) {
  at::Generator g = gen(seed);
  Rho1Excess e;
  e.excess = distinct ? at::randn({B, S, K}, g) : at::randint(-6, 7, {B, S, K}, g).to(at::kFloat) * 0.25;
  e.valid = at::rand({B, S, K}, g).gt(0.35);
  if (seed % 3 == 0) e.valid.select(2, K - 1).fill_(false);
  e.excess = at::where(e.valid, e.excess, at::zeros({}, e.excess.options()));
  return e;
}

// The test's own interpolated quantile: sort, position q (n-1) (snapped within 1e-9), lerp.
double my_quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  double pos = q * double(v.size() - 1);
  if (std::abs(pos - std::round(pos)) < 1e-9) pos = std::round(pos);
  const size_t lo = size_t(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

TEST(Rho1Keys, IntegerImageSortsLikeTheFloats) {
  at::Tensor v = at::cat({at::randn({500}, gen(1)) * 1e3, at::randn({200}, gen(2)) * 1e-30,
                          at::tensor({0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::min(),
                                      -std::numeric_limits<float>::denorm_min()})});
  at::Tensor keys = float_order_keys(v);
  EXPECT_GE(keys.min().item<int64_t>(), 0);
  EXPECT_LT(keys.max().item<int64_t>(), int64_t(1) << 32);
  auto fv = v.accessor<float, 1>();
  auto kv = keys.accessor<int64_t, 1>();
  for (int64_t i = 0; i < v.numel(); ++i)
    for (int64_t j = 0; j < v.numel(); j += 7) {
      ASSERT_EQ(fv[i] < fv[j], kv[i] < kv[j]) << fv[i] << " vs " << fv[j];
      ASSERT_EQ(fv[i] == fv[j], kv[i] == kv[j]) << fv[i] << " vs " << fv[j];
    }
  for (int64_t i = 0; i < v.numel(); ++i) {
    const float back = float_from_order_key(kv[i]);
    EXPECT_TRUE(back == fv[i]) << fv[i];
  }
}

TEST(Rho1Keep, CountIsOnePlusFloorOfTheFractionOfNMinusOne) {
  const std::vector<std::pair<int64_t, int64_t>> fractions = {{7, 10}, {6, 10}, {1, 2},    {1, 4}, {9, 10},
                                                              {1, 20}, {1, 1},  {29, 100}, {1, 3}};
  for (auto [a, b] : fractions)
    for (int64_t n = 0; n <= 600; ++n) {
      const int64_t expected = n == 0 ? 0 : 1 + (a * (n - 1)) / b;
      ASSERT_EQ(rho1_keep_count(n, double(a) / double(b)), expected) << a << "/" << b << " of " << n;
    }
}

TEST(Rho1Select, LocalEqualsAnInterpolatedQuantilePerMicroBatchAndHead) {
  const int64_t K = 3;
  for (double p : {0.7, 0.6, 0.25, 1.0, 0.05}) {
    std::vector<Rho1Excess> mbs;
    for (int i = 0; i < 4; ++i) mbs.push_back(synthetic(1 + i % 3, 5 + 4 * i, K, 40 + i, /*distinct=*/i == 1));
    Rho1Selection sel = rho1_select_local(mbs, p);
    ASSERT_EQ(sel.weights.size(), mbs.size());
    int64_t any_partial = 0;
    for (size_t i = 0; i < mbs.size(); ++i) {
      ASSERT_EQ(sel.weights[i].sizes(), mbs[i].excess.sizes());
      for (int64_t k = 0; k < K; ++k) {
        at::Tensor ex = mbs[i].excess.select(2, k).reshape({-1}), va = mbs[i].valid.select(2, k).reshape({-1});
        at::Tensor w = sel.weights[i].select(2, k).reshape({-1});
        std::vector<double> vals;
        for (int64_t j = 0; j < ex.numel(); ++j)
          if (va[j].item<bool>()) vals.push_back(ex[j].item<double>());
        const double t = vals.empty() ? 0.0 : my_quantile(vals, 1.0 - p);
        int64_t chosen = 0;
        for (int64_t j = 0; j < ex.numel(); ++j) {
          const bool expect = va[j].item<bool>() && ex[j].item<double>() >= t;
          ASSERT_EQ(w[j].item<float>(), expect ? 1.0f : 0.0f)
              << "p " << p << " mb " << i << " head " << k << " at " << j;
          chosen += expect;
        }
        any_partial += chosen > 0 && chosen < int64_t(vals.size());
      }
    }
    if (p < 1.0) {
      EXPECT_GT(any_partial, 0) << "the data must exercise a real threshold";
    }
  }
}

// The top keep(n) of the concatenation, every value tied with the keep-th largest included.
std::vector<double> thresholds_by_sorting(const std::vector<Rho1Excess>& mbs, double p, std::vector<int64_t>* n_out) {
  const int64_t K = mbs.front().excess.size(2);
  std::vector<double> thr;
  for (int64_t k = 0; k < K; ++k) {
    std::vector<double> all;
    for (const auto& m : mbs) {
      at::Tensor ex = m.excess.select(2, k).reshape({-1}), va = m.valid.select(2, k).reshape({-1});
      for (int64_t j = 0; j < ex.numel(); ++j)
        if (va[j].item<bool>()) all.push_back(ex[j].item<double>());
    }
    std::sort(all.begin(), all.end(), std::greater<double>());
    const int64_t n = int64_t(all.size());
    const int64_t keep = n == 0 ? 0 : 1 + int64_t(std::floor(p * double(n - 1) + 1e-9));
    thr.push_back(keep ? all[size_t(keep - 1)] : std::numeric_limits<double>::infinity());
    n_out->push_back(n);
  }
  return thr;
}

TEST(Rho1Select, GlobalInOneProcessIsTheTopOfTheConcatenatedStepWithTies) {
  const int64_t K = 4;
  std::vector<Rho1Excess> mbs;
  for (int i = 0; i < 5; ++i) mbs.push_back(synthetic(2, 3 + 5 * i, K, 70 + i));
  for (double p : {0.7, 0.3, 1.0}) {
    std::vector<int64_t> n;
    std::vector<double> thr = thresholds_by_sorting(mbs, p, &n);
    Rho1Selection sel = rho1_select_global(mbs, K, p, nullptr);
    const std::vector<Rho1HeadSelection> heads = sel.read_heads();
    for (int64_t k = 0; k < K; ++k) {
      EXPECT_EQ(heads[k].n_valid, n[k]);
      int64_t selected = 0;
      for (size_t i = 0; i < mbs.size(); ++i) {
        at::Tensor expect = mbs[i].valid.select(2, k).logical_and(
            mbs[i].excess.select(2, k).to(at::kDouble).ge(thr[k]));
        ASSERT_TRUE(sel.weights[i].select(2, k).eq(expect.to(at::kFloat)).all().item<bool>())
            << "p " << p << " head " << k;
        selected += expect.sum().item<int64_t>();
      }
      EXPECT_EQ(heads[k].selected, selected);
      if (n[k]) {
        EXPECT_EQ(heads[k].threshold, thr[k]);
        EXPECT_GE(heads[k].selected, heads[k].keep);
      }
    }
  }
}

TEST(Rho1Select, GlobalOnOneMicroBatchOfDistinctValuesEqualsLocal) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    std::vector<Rho1Excess> one = {synthetic(3, 17, 3, 100 + seed, /*distinct=*/true)};
    for (double p : {0.7, 0.6, 0.15}) {
      Rho1Selection g = rho1_select_global(one, 3, p, nullptr), l = rho1_select_local(one, p);
      EXPECT_TRUE(g.weights[0].equal(l.weights[0])) << "seed " << seed << " p " << p;
      const std::vector<Rho1HeadSelection> lh = l.read_heads(), gh = g.read_heads();
      for (size_t k = 0; k < 3; ++k) EXPECT_EQ(lh[k].selected, gh[k].keep);
    }
  }
}

// ---- real models ------------------------------------------------------------------------------

constexpr int64_t kVocab = 64;

ModelArgs policy_args() { return test::tiny_args(2, 3); }
ModelArgs ref_args() { return test::tiny_args(3, 1); }

std::unordered_map<std::string, at::Tensor> as_double(std::unordered_map<std::string, at::Tensor> p) {
  for (auto& kv : p) kv.second = kv.second.to(at::kDouble);
  return p;
}

std::vector<MtpBatch> micro_batches() {
  std::vector<MtpBatch> mbs;
  const int64_t shapes[2][2] = {{3, 13}, {2, 9}};  // ragged across micro-batches
  for (int i = 0; i < 2; ++i) {
    MtpBatch b;
    b.tokens = test::random_tokens(shapes[i][0], shapes[i][1], kVocab, 30 + i);
    b.labels = test::prompt_masked_labels(b.tokens, 7 + i);
    mbs.push_back(b);
  }
  return mbs;
}

double excess_of(double pce, double rce, const std::string& mode) {
  if (mode == "signed") return pce - rce;
  if (mode == "absolute") return std::abs(pce - rce);
  return rce;
}

TEST(Rho1Excess, RealModelsEqualADoubleComputationFromFullLogits) {
  MtpModel policy(policy_args()), ref(ref_args());
  LocalParams ps = test::make_local(policy, 3), rs = test::make_local(ref, 4);
  LocalParams pd(policy.param_specs(), as_double(policy.init_params(3)));
  LocalParams rd(ref.param_specs(), as_double(ref.init_params(4)));
  MtpPassOptions opt;
  opt.training = false;
  opt.loss_chunk_size = 3;  // ragged chunks
  for (const MtpBatch& b : micro_batches()) {
    at::Tensor pce = mtp_token_ce(policy, ps, b, opt), rce = mtp_token_ce(ref, rs, b, opt);
    at::Tensor pl = policy.forward_logits(pd, b.tokens, {}), rl = ref.forward_logits(rd, b.tokens, {});
    at::Tensor pce_d = test::double_token_ce(pl, b.labels), rce_d = test::double_token_ce(rl, b.labels);
    const int64_t B = b.tokens.size(0), S = b.tokens.size(1);
    for (std::string mode : {"signed", "absolute", "difficult"}) {
      Rho1Excess e = rho1_excess_loss(pce, rce, b.labels, mode_of(mode));
      ASSERT_EQ(e.excess.sizes(), (at::IntArrayRef{B, S, 3}));
      int64_t n_valid = 0;
      for (int64_t i = 0; i < B; ++i)
        for (int64_t t = 0; t < S; ++t)
          for (int64_t k = 1; k <= 3; ++k) {
            const bool valid = t + k < S && b.labels[i][t + k].item<int64_t>() != -100;
            ASSERT_EQ(e.valid[i][t][k - 1].item<bool>(), valid) << i << " " << t << " " << k;
            if (!valid) {
              EXPECT_EQ(e.excess[i][t][k - 1].item<float>(), 0.0f);
              continue;
            }
            ++n_valid;
            // The reference predicts the same target t+k from its own position t+k-1.
            const double want = excess_of(pce_d[i][t][k - 1].item<double>(), rce_d[i][t + k - 1][0].item<double>(),
                                          mode);
            EXPECT_NEAR(e.excess[i][t][k - 1].item<double>(), want, 1e-5 * std::max(1.0, std::abs(want)))
                << mode << " " << i << " " << t << " " << k;
          }
      EXPECT_GT(n_valid, 10);
    }
  }
}

struct LossRun {
  double loss = 0;
  std::map<std::string, at::Tensor> grads;
  std::vector<at::Tensor> weights;
};

// Production path: fp32, sequential unembedding, global selection over both micro-batches.
LossRun production_run(const std::string& mode, const std::string& norm, double p) {
  MtpModel policy(policy_args()), ref(ref_args());
  LocalParams ps = test::make_local(policy, 3), rs = test::make_local(ref, 4);
  MtpPassOptions score;
  score.training = false;
  std::vector<MtpBatch> mbs = micro_batches();
  std::vector<Rho1Excess> ex;
  for (const auto& b : mbs)
    ex.push_back(
        rho1_excess_loss(mtp_token_ce(policy, ps, b, score), mtp_token_ce(ref, rs, b, score), b.labels, mode_of(mode)));
  Rho1Selection sel = rho1_select_global(ex, 3, p, nullptr);
  std::vector<double> counts;
  for (const auto& h : sel.read_heads()) counts.push_back(double(norm == "selected" ? h.selected : h.n_valid));
  LossRun r;
  MtpPassOptions train;
  train.loss_chunk_size = 4;
  for (size_t i = 0; i < mbs.size(); ++i) {
    MtpBatch b = mbs[i];
    b.weights = sel.weights[i];
    r.loss += mtp_forward_backward(policy, ps, b, counts, train).loss;
  }
  r.grads = test::grads_of(ps);
  r.weights = sel.weights;
  return r;
}

// Written from the spec in double: full logits, excess, top keep(n) of the step per head (ties
// kept), loss = mean over heads of (sum of selected CE / normalizer), autograd in double.
LossRun double_run(const std::string& mode, const std::string& norm, int64_t p_num, int64_t p_den) {
  MtpModel policy(policy_args()), ref(ref_args());
  LocalParams pd(policy.param_specs(), as_double(policy.init_params(3)));
  LocalParams rd(ref.param_specs(), as_double(ref.init_params(4)));
  std::vector<MtpBatch> mbs = micro_batches();
  std::vector<at::Tensor> logp, ex;
  for (const auto& b : mbs) {
    at::Tensor l = policy.forward_logits(pd, b.tokens, {});
    logp.push_back(at::log_softmax(l, -1));
    at::Tensor pce = test::double_token_ce(l.detach(), b.labels);
    at::Tensor rce = test::double_token_ce(ref.forward_logits(rd, b.tokens, {}).detach(), b.labels);
    const int64_t B = b.tokens.size(0), S = b.tokens.size(1);
    at::Tensor e = at::full({B, S, 3}, std::nan(""), at::kDouble);
    for (int64_t i = 0; i < B; ++i)
      for (int64_t k = 1; k <= 3; ++k)
        for (int64_t t = 0; t + k < S; ++t)
          if (b.labels[i][t + k].item<int64_t>() != -100)
            e[i][t][k - 1] = excess_of(pce[i][t][k - 1].item<double>(), rce[i][t + k - 1][0].item<double>(), mode);
    ex.push_back(e);
  }
  LossRun r;
  for (const auto& e : ex) r.weights.push_back(at::zeros(e.sizes(), at::kFloat));
  std::vector<at::Tensor> head_sums(3);
  std::vector<double> counts(3, 0);
  for (int64_t k = 0; k < 3; ++k) {
    std::vector<double> all;
    for (const auto& e : ex) {
      at::Tensor v = e.select(2, k).reshape({-1});
      for (int64_t j = 0; j < v.numel(); ++j)
        if (!std::isnan(v[j].item<double>())) all.push_back(v[j].item<double>());
    }
    std::sort(all.begin(), all.end(), std::greater<double>());
    const int64_t n = int64_t(all.size()), keep = n ? 1 + (p_num * (n - 1)) / p_den : 0;
    const double thr = keep ? all[size_t(keep - 1)] : INFINITY;
    int64_t selected = 0;
    at::Tensor sum = at::zeros({}, at::kDouble);
    for (size_t m = 0; m < mbs.size(); ++m) {
      const at::Tensor& e = ex[m];
      for (int64_t i = 0; i < e.size(0); ++i)
        for (int64_t t = 0; t < e.size(1); ++t) {
          const double v = e[i][t][k].item<double>();
          if (std::isnan(v) || v < thr) continue;
          ++selected;
          r.weights[m][i][t][k] = 1.0f;
          sum = sum - logp[m][i][t][k][mbs[m].labels[i][t + k + 1].item<int64_t>()];
        }
    }
    head_sums[size_t(k)] = sum;
    counts[size_t(k)] = double(norm == "selected" ? selected : n);
  }
  int64_t heads = 0;
  for (double c : counts) heads += c > 0;
  at::Tensor loss = at::zeros({}, at::kDouble);
  for (int64_t k = 0; k < 3; ++k)
    if (counts[size_t(k)] > 0) loss = loss + head_sums[size_t(k)] / (counts[size_t(k)] * double(heads));
  loss.backward();
  r.loss = loss.item<double>();
  r.grads = test::grads_of(pd);
  return r;
}

TEST(Rho1Loss, SelectedTokenLossAndGradientsEqualADoubleComputation) {
  for (std::string mode : {"signed", "absolute", "difficult"})
    for (std::string norm : {"selected", "valid"}) {
      const std::string what = mode + "/" + norm;
      LossRun got = production_run(mode, norm, 0.7), want = double_run(mode, norm, 7, 10);
      for (size_t i = 0; i < want.weights.size(); ++i)
        ASSERT_TRUE(got.weights[i].equal(want.weights[i])) << what << " micro-batch " << i;
      EXPECT_NEAR(got.loss, want.loss, 1e-5 * want.loss) << what;
      ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
      ASSERT_GT(want.grads.size(), 20u);
      for (const auto& kv : want.grads) {
        ASSERT_TRUE(got.grads.count(kv.first)) << kv.first;
        EXPECT_LE(test::rel_diff(got.grads.at(kv.first), kv.second), 1e-5) << what << " " << kv.first;
      }
    }
}

}  // namespace
}  // namespace wmtp
