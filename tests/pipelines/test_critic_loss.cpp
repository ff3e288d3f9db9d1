// Critic losses, their gradients and the diagnostics against an independent computation written
// here in plain double-precision C++ from the spec in docs/critic.md (loops per sequence,
// closed-form λ-returns, hand-derived gradients) — never against the production functions. The batch
// has prompts, right padding, sequences cut at max_length (no padding, solution up to the last
// position), a sequence without any solution token and a one-token solution.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "pipelines/losses/critic_loss.h"

namespace wmtp {
namespace {

constexpr int64_t S = 12;

// One row: prompt tokens, solution tokens, then padding up to S.
struct RowShape {
  int64_t prompt, solution;
};
// Pairs: rows 0..B-1 pos, B..2B-1 neg.
const std::vector<RowShape> kRows = {
    {3, 5},   // pos0: padded
    {2, 10},  // pos1: cut at max_length (no padding)
    {12, 0},  // pos2: prompt fills the sequence: no solution token
    {4, 1},   // pos3: one solution token
    {3, 8},   // neg0
    {5, 2},   // neg1
    {1, 11},  // neg2: cut at max_length
    {2, 3},   // neg3
};

struct Data {
  int64_t N = 0;
  std::vector<double> v;                 // N*S values
  std::vector<int> m;                    // solution mask
  std::vector<int> am;                   // attention mask
  at::Tensor values, labels, attention;  // production inputs (fp32 values)
};

Data make_data(uint64_t seed, double scale = 1.0) {
  Data d;
  d.N = int64_t(kRows.size());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  d.labels = at::full({d.N, S}, -100, at::kLong);
  d.attention = at::zeros({d.N, S}, at::kLong);
  for (int64_t b = 0; b < d.N; ++b) {
    const auto& r = kRows[size_t(b)];
    for (int64_t t = 0; t < S; ++t) {
      // fp32-representable values, so production and reference see the same numbers
      const double x = double(float(u(rng)));
      d.v.push_back(x);
      const bool in_seq = t < r.prompt + r.solution;
      const bool sol = t >= r.prompt && in_seq;
      d.m.push_back(sol ? 1 : 0);
      d.am.push_back(in_seq ? 1 : 0);
      if (sol) d.labels[b][t] = 7;
      if (in_seq) d.attention[b][t] = 1;
    }
  }
  d.values = at::tensor(d.v, at::kDouble).reshape({d.N, S}).to(at::kFloat);
  return d;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// v̄ per row and its token count.
std::vector<double> vbar(const Data& d, std::vector<double>* n_out = nullptr) {
  std::vector<double> out;
  for (int64_t b = 0; b < d.N; ++b) {
    double s = 0, n = 0;
    for (int64_t t = 0; t < S; ++t) s += d.v[size_t(b * S + t)] * d.m[size_t(b * S + t)], n += d.m[size_t(b * S + t)];
    out.push_back(s / (n + 1e-8));
    if (n_out) n_out->push_back(n);
  }
  return out;
}

// Closed form of the λ-return: G_t = (λγ)^(T-t) R + (1-λ)γ Σ_{j=t+1..T} (λγ)^(j-t-1) V_j, T = last
// attended position.
std::vector<double> lambda_targets(const Data& d, int64_t b, double R, double gamma, double lam) {
  std::vector<double> g(size_t(S), 0.0);
  int64_t T = -1;
  for (int64_t t = 0; t < S; ++t)
    if (d.am[size_t(b * S + t)]) T = t;
  for (int64_t t = 0; t <= T; ++t) {
    double x = std::pow(lam * gamma, double(T - t)) * R;
    for (int64_t j = t + 1; j <= T; ++j)
      x += (1 - lam) * gamma * std::pow(lam * gamma, double(j - t - 1)) * d.v[size_t(b * S + j)];
    g[size_t(t)] = x;
  }
  return g;
}

double huber(double x, double beta) { return std::abs(x) < beta ? 0.5 * x * x / beta : std::abs(x) - 0.5 * beta; }
double huber_grad(double x, double beta) { return std::abs(x) < beta ? x / beta : (x > 0 ? 1.0 : -1.0); }

struct Expected {
  double loss = 0;
  std::vector<double> grad;  // N*S
};

Expected expected_pairwise(const Data& d, double coef) {
  const int64_t B = d.N / 2;
  std::vector<double> n;
  std::vector<double> vb = vbar(d, &n);
  Expected e;
  e.grad.assign(size_t(d.N * S), 0.0);
  for (int64_t i = 0; i < B; ++i) {
    const double diff = vb[size_t(i)] - vb[size_t(B + i)];
    e.loss += -std::log(sigmoid(diff)) * coef / double(B);
    const double dl = -(1.0 - sigmoid(diff)) * coef / double(B);  // d loss / d diff
    for (int64_t t = 0; t < S; ++t) {
      e.grad[size_t(i * S + t)] += dl * d.m[size_t(i * S + t)] / (n[size_t(i)] + 1e-8);
      e.grad[size_t((B + i) * S + t)] -= dl * d.m[size_t((B + i) * S + t)] / (n[size_t(B + i)] + 1e-8);
    }
  }
  return e;
}

Expected expected_lambda(const Data& d, const CriticLossConfig& c, double lam) {
  const int64_t B = d.N / 2;
  Expected e;
  e.grad.assign(size_t(d.N * S), 0.0);
  int64_t counted[2] = {0, 0};
  for (int64_t b = 0; b < d.N; ++b) {
    int64_t n = 0;
    for (int64_t t = 0; t < S; ++t) n += d.m[size_t(b * S + t)];
    if (n > 0) counted[b < B ? 0 : 1] += 1;
  }
  for (int64_t b = 0; b < d.N; ++b) {
    const int side = b < B ? 0 : 1;
    std::vector<double> g = lambda_targets(d, b, side == 0 ? 1.0 : 0.0, c.gamma, lam);
    int64_t n = 0;
    for (int64_t t = 0; t < S; ++t) n += d.m[size_t(b * S + t)];
    if (n == 0) continue;
    const double w = c.coef / (2.0 * double(counted[side])) / double(n);
    for (int64_t t = 0; t < S; ++t) {
      if (!d.m[size_t(b * S + t)]) continue;
      const double x = d.v[size_t(b * S + t)] - g[size_t(t)];
      e.loss += w * (c.loss_fn == CriticTokenLoss::Mse ? x * x : huber(x, c.huber_delta));
      e.grad[size_t(b * S + t)] = w * (c.loss_fn == CriticTokenLoss::Mse ? 2 * x : huber_grad(x, c.huber_delta));
    }
  }
  return e;
}

// The production path as a pipeline runs it: the batch split into micro-batches of `split` pairs
// (each a [2b, S] forward), counts summed over them first, then each micro-batch normalized by the
// global counts; the returned loss is the sum and the gradient lands in one leaf.
std::pair<double, at::Tensor> production(const Data& d, const CriticLossConfig& c, double lam, int64_t split) {
  const int64_t B = d.N / 2;
  at::Tensor leaf = d.values.clone().requires_grad_(true);
  std::vector<std::vector<int64_t>> groups;
  for (int64_t i = 0; i < B; i += split) {
    std::vector<int64_t> rows;
    for (int64_t j = i; j < std::min(B, i + split); ++j) rows.push_back(j);
    for (int64_t j = i; j < std::min(B, i + split); ++j) rows.push_back(B + j);
    groups.push_back(rows);
  }
  auto pick = [](const at::Tensor& t, const std::vector<int64_t>& rows) {
    return t.index_select(0, at::tensor(rows, at::kLong));
  };
  std::vector<double> counts(kCriticCounts, 0.0);
  for (const auto& g : groups) {
    std::vector<double> local = critic_local_counts(pick(d.labels, g));
    for (int i = 0; i < kCriticCounts; ++i) counts[size_t(i)] += local[size_t(i)];
  }
  double loss = 0;
  for (const auto& g : groups) {
    CriticLossTerms terms = critic_loss_terms(pick(leaf, g), pick(d.labels, g), pick(d.attention, g), c, lam);
    at::Tensor l = critic_loss(terms, c, counts);
    l.backward();
    loss += l.item<double>();
  }
  return {loss, leaf.grad().to(at::kDouble)};
}

void expect_close(const Expected& e, const std::pair<double, at::Tensor>& got, const std::string& what) {
  EXPECT_NEAR(got.first, e.loss, 1e-6 * std::max(1.0, std::abs(e.loss))) << what;
  double scale = 0;
  for (double g : e.grad) scale = std::max(scale, std::abs(g));
  ASSERT_GT(scale, 0.0) << what;
  const at::Tensor g = got.second.reshape({-1}).contiguous();
  double worst = 0;
  for (size_t i = 0; i < e.grad.size(); ++i)
    worst = std::max(worst, std::abs(g[int64_t(i)].item<double>() - e.grad[i]));
  EXPECT_LT(worst / scale, 1e-5) << what << ": max gradient difference " << worst << " (scale " << scale << ")";
}

TEST(CriticLoss, PairwiseLossAndGradientMatchDoubleReference) {
  Data d = make_data(1, 2.0);
  CriticLossConfig c;
  c.type = CriticLoss::Pairwise;
  for (double coef : {1.0, 0.5})
    for (int64_t split : {4, 1, 3}) {  // one micro-batch, one pair each, uneven
      c.coef = coef;
      expect_close(expected_pairwise(d, coef), production(d, c, 1.0, split),
                   "pairwise coef " + std::to_string(coef) + " split " + std::to_string(split));
    }
}

TEST(CriticLoss, LambdaReturnLossAndGradientMatchDoubleReference) {
  Data d = make_data(2, 1.5);
  CriticLossConfig c;
  c.type = CriticLoss::LambdaReturn;
  for (CriticTokenLoss fn : {CriticTokenLoss::Mse, CriticTokenLoss::Huber})
    for (double lam : {1.0, 0.95, 0.5, 0.0})
      for (double gamma : {1.0, 0.9})
        for (int64_t split : {4, 1, 3}) {
          c.loss_fn = fn;
          c.gamma = gamma;
          c.coef = 0.7;
          c.huber_delta = 0.3;  // both branches of smooth-L1 occur with |V - G| up to ~2.5
          expect_close(expected_lambda(d, c, lam), production(d, c, lam, split),
                       std::string(fn == CriticTokenLoss::Mse ? "mse" : "huber") + " lam " + std::to_string(lam) +
                           " gamma " + std::to_string(gamma) + " split " + std::to_string(split));
        }
}

TEST(CriticLoss, LambdaTargetsOverWholeSequenceEndAtLastToken) {
  Data d = make_data(3);
  const int64_t B = d.N / 2;
  std::vector<double> rewards;
  for (int64_t b = 0; b < d.N; ++b) rewards.push_back(b < B ? 1.0 : 0.0);
  for (double lam : {1.0, 0.95, 0.3}) {
    at::Tensor g = lambda_return_targets(d.values, d.labels, d.attention, rewards, 0.97, lam);
    for (int64_t b = 0; b < d.N; ++b) {
      bool has_solution = false;
      for (int64_t t = 0; t < S; ++t) has_solution |= d.m[size_t(b * S + t)] != 0;
      std::vector<double> want = lambda_targets(d, b, rewards[size_t(b)], 0.97, lam);
      for (int64_t t = 0; t < S; ++t) {
        const double w = has_solution ? want[size_t(t)] : 0.0;  // rows without solution: no targets
        EXPECT_NEAR(g[b][t].item<double>(), w, 1e-12) << "row " << b << " t " << t << " lam " << lam;
      }
    }
  }
  // λ = 1, γ = 1 (validation): Monte-Carlo, every attended position's target is the reward.
  at::Tensor mc = lambda_return_targets(d.values, d.labels, d.attention, rewards, 1.0, 1.0);
  EXPECT_EQ(mc[0][0].item<double>(), 1.0);
  EXPECT_EQ(mc[1][S - 1].item<double>(), 1.0);  // truncated row: terminal at the last position
  EXPECT_EQ(mc[0][S - 1].item<double>(), 0.0);  // padding
}

TEST(CriticLoss, CountsSkipSequencesWithoutSolution) {
  Data d = make_data(4);
  std::vector<double> c = critic_local_counts(d.labels);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0], 4.0);
  EXPECT_EQ(c[1], 3.0);  // pos2 has no solution token
  EXPECT_EQ(c[2], 4.0);
}

// [critic]'s spellings pick what the loss computes, and print back as read.
TEST(CriticLoss, ConfigSpellingsMapToTheirMeaning) {
  CriticLossConfig c;
  ConfigSet set;
  set.add("critic", c);
  EXPECT_EQ(c.type, CriticLoss::Pairwise);
  set.apply_overrides({"critic.loss=lambda_return", "critic.loss_fn=mse", "critic.lambda_schedule=cosine"});
  EXPECT_EQ(c.type, CriticLoss::LambdaReturn);
  EXPECT_EQ(c.loss_fn, CriticTokenLoss::Mse);
  EXPECT_EQ(c.lambda_schedule, LambdaSchedule::Cosine);
  const std::string toml = set.to_toml();
  for (const char* line : {"loss = 'lambda_return'", "loss_fn = 'mse'", "lambda_schedule = 'cosine'"})
    EXPECT_NE(toml.find(line), std::string::npos) << line << "\n" << toml;
  set.apply_overrides({"critic.loss=pairwise", "critic.loss_fn=huber", "critic.lambda_schedule=constant"});
  EXPECT_EQ(c.type, CriticLoss::Pairwise);
  EXPECT_EQ(c.loss_fn, CriticTokenLoss::Huber);
  EXPECT_EQ(c.lambda_schedule, LambdaSchedule::Constant);
  EXPECT_THROW(set.apply_override("critic.loss_fn=l1"), Error);
}

TEST(CriticLoss, LambdaSchedule) {
  CriticLossConfig c;
  c.lambda_start = 1.0, c.lambda_end = 0.9, c.lambda_warmup_steps = 10, c.lambda_decay_steps = 20;
  c.lambda_schedule = LambdaSchedule::Constant;
  for (int64_t s : {0, 10, 25, 1000}) EXPECT_EQ(scheduled_lambda(c, s), 1.0);
  c.lambda_schedule = LambdaSchedule::Linear;
  const std::vector<std::pair<int64_t, double>> linear = {{0, 1.0},   {9, 1.0},    {10, 1.0}, {15, 0.975},
                                                          {20, 0.95}, {29, 0.905}, {30, 0.9}, {500, 0.9}};
  for (auto [s, want] : linear) EXPECT_NEAR(scheduled_lambda(c, s), want, 1e-12) << "linear step " << s;
  c.lambda_schedule = LambdaSchedule::Cosine;
  const std::vector<std::pair<int64_t, double>> cosine = {
      {0, 1.0}, {10, 1.0}, {15, 0.9853553390593274}, {20, 0.95}, {25, 0.9146446609406726}, {30, 0.9}, {99, 0.9}};
  for (auto [s, want] : cosine) EXPECT_NEAR(scheduled_lambda(c, s), want, 1e-12) << "cosine step " << s;
  c.lambda_decay_steps = 0;  // no decay: a step from start to end
  EXPECT_EQ(scheduled_lambda(c, 9), 1.0);
  EXPECT_EQ(scheduled_lambda(c, 10), 0.9);
}

TEST(CriticLoss, ConfigErrorsNameTheKey) {
  CriticLossConfig c;
  c.lambda_end = 1.5;
  try {
    c.validate();
    FAIL() << "accepted lambda_end 1.5";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[critic] lambda_end"), std::string::npos) << e.what();
  }
}

// Diagnostics: independent per-sequence loops with the reference's definitions; sums over
// micro-batches add up to the whole batch's (what the all-reduce relies on).
TEST(CriticLoss, MetricSumsMatchPerSequenceDefinitions) {
  Data d = make_data(5, 3.0);
  const int64_t B = d.N / 2;
  std::vector<double> n;
  std::vector<double> vb = vbar(d, &n);
  double correct = 0, mpos = 0, mneg = 0, var[2] = {0, 0}, spike[2] = {0, 0}, abs_td[2] = {0, 0}, corr[2] = {0, 0};
  int corr_n[2] = {0, 0};
  for (int64_t b = 0; b < d.N; ++b) {
    const int side = b < B ? 0 : 1;
    std::vector<double> x, p;
    for (int64_t t = 0; t < S; ++t)
      if (d.m[size_t(b * S + t)]) x.push_back(d.v[size_t(b * S + t)]), p.push_back(double(t));
    double v2 = 0;
    for (double xi : x) v2 += (xi - vb[size_t(b)]) * (xi - vb[size_t(b)]);
    var[side] += x.empty() ? 0.0 : v2 / double(x.size());
    double sum_td = 0, max_td = 0;
    int n_td = 0;
    for (int64_t t = 0; t + 1 < S; ++t)
      if (d.m[size_t(b * S + t)] && d.m[size_t(b * S + t + 1)]) {
        const double a = std::abs(d.v[size_t(b * S + t + 1)] - d.v[size_t(b * S + t)]);
        sum_td += a, max_td = std::max(max_td, a), ++n_td;
      }
    const double mean_td = n_td ? sum_td / n_td : 0.0;
    abs_td[side] += mean_td;
    spike[side] += max_td / (mean_td + 1e-8);
    if (x.size() >= 3) {
      double mx = 0, mp = 0;
      for (size_t i = 0; i < x.size(); ++i) mx += x[i] / double(x.size()), mp += p[i] / double(x.size());
      double sxy = 0, sxx = 0, syy = 0;
      for (size_t i = 0; i < x.size(); ++i)
        sxy += (x[i] - mx) * (p[i] - mp), sxx += (x[i] - mx) * (x[i] - mx), syy += (p[i] - mp) * (p[i] - mp);
      corr[side] += sxy / (std::sqrt(sxx) * std::sqrt(syy) + 1e-8);
      corr_n[side] += 1;
    }
  }
  for (int64_t i = 0; i < B; ++i) {
    correct += vb[size_t(i)] > vb[size_t(B + i)] ? 1 : 0;
    mpos += vb[size_t(i)], mneg += vb[size_t(B + i)];
  }
  ASSERT_GT(corr_n[0], 0);
  ASSERT_GT(correct, 0.0);

  // Sums of two micro-batches (pairs {0, 1} and {2, 3}).
  std::array<double, kCriticMetricSums> sums{};
  for (int64_t first : {0, 2}) {
    std::vector<int64_t> rows = {first, first + 1, B + first, B + first + 1};
    at::Tensor idx = at::tensor(rows, at::kLong);
    const at::Tensor part = critic_metric_sums(d.values.index_select(0, idx), d.labels.index_select(0, idx)).cpu();
    for (int i = 0; i < kCriticMetricSums; ++i) sums[size_t(i)] += part[i].item<double>();
  }
  CriticMetrics m = critic_metrics(sums.data());
  const double tol = 1e-6;  // values are fp32 numbers; the diagnostics run in fp64
  EXPECT_NEAR(m.pairwise_accuracy, correct / B, 1e-12);
  EXPECT_NEAR(m.mean_pos, mpos / B, tol);
  EXPECT_NEAR(m.mean_neg, mneg / B, tol);
  EXPECT_NEAR(m.margin, (mpos - mneg) / B, tol);
  EXPECT_NEAR(m.pos_token_variance, var[0] / B, tol);
  EXPECT_NEAR(m.neg_token_variance, var[1] / B, tol);
  EXPECT_NEAR(m.pos_spikiness, spike[0] / B, tol);
  EXPECT_NEAR(m.neg_spikiness, spike[1] / B, tol);
  EXPECT_NEAR(m.pos_mean_abs_td, abs_td[0] / B, tol);
  EXPECT_NEAR(m.neg_mean_abs_td, abs_td[1] / B, tol);
  EXPECT_NEAR(m.pos_position_corr, corr[0] / corr_n[0], tol);
  EXPECT_NEAR(m.neg_position_corr, corr[1] / corr_n[1], tol);
}

TEST(CriticLoss, BadShapesAreUsageErrors) {
  Data d = make_data(6);
  CriticLossConfig c;
  EXPECT_THROW(critic_loss_terms(d.values.narrow(0, 0, 3), d.labels.narrow(0, 0, 3), d.attention.narrow(0, 0, 3), c,
                                 1.0),
               Error);
  EXPECT_THROW(critic_loss_terms(d.values, d.labels.narrow(1, 0, 5), d.attention, c, 1.0), Error);
}

}  // namespace
}  // namespace wmtp
