// Weighted MTP cross-entropy against a per-token double-precision computation written from the
// spec (docs/model.md, "Loss"): alignment of heads to targets, the three weight modes, -100 masking, counts,
// normalization over contributing heads, fp32 CE for bf16 logits.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "core/error.h"
#include "model/mtp_loss.h"

namespace wmtp {
namespace {

struct Expected {
  std::vector<double> wsum, usum;
  std::vector<int64_t> count;
};

// mode: 0 none, 1 position [B,S], 2 per-head [B,S,K]
Expected per_token(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& w, int mode) {
  const int64_t B = logits.size(0), S = logits.size(1), K = logits.size(2), V = logits.size(3);
  at::Tensor L = logits.to(at::kDouble);
  Expected e{std::vector<double>(K, 0), std::vector<double>(K, 0), std::vector<int64_t>(K, 0)};
  for (int64_t k = 1; k <= K; ++k)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t + k < S; ++t) {
        const int64_t target = labels[b][t + k].item<int64_t>();
        if (target == -100) continue;
        double mx = -INFINITY;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, L[b][t][k - 1][v].item<double>());
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(L[b][t][k - 1][v].item<double>() - mx);
        const double ce = -(L[b][t][k - 1][target].item<double>() - mx - std::log(z));
        double weight = 1.0;
        if (mode == 1) weight = w[b][t + k].item<double>();
        if (mode == 2) weight = w[b][t][k - 1].item<double>();
        e.wsum[k - 1] += ce * weight;
        e.usum[k - 1] += ce;
        e.count[k - 1] += 1;
      }
  return e;
}

TEST(MtpLoss, SumsMatchPerTokenDefinitionForAllWeightModes) {
  const int64_t B = 2, S = 9, K = 3, V = 7;
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
  at::Tensor logits = at::randn({B, S, K, V}, g);
  at::Tensor labels = at::randint(V, {B, S}, g, at::TensorOptions().dtype(at::kLong));
  labels[0].narrow(0, 0, 3).fill_(-100);  // prompt
  labels[1].narrow(0, 0, 2).fill_(-100);
  labels[1].narrow(0, 7, 2).fill_(-100);  // right padding
  at::Tensor wpos = at::rand({B, S}, g) * 2, whead = at::rand({B, S, K}, g) * 2;
  for (int mode = 0; mode < 3; ++mode) {
    at::Tensor w = mode == 0 ? at::Tensor() : mode == 1 ? wpos : whead;
    Expected e = per_token(logits, labels, w, mode);
    MtpCeSums s = mtp_ce_sums(logits, labels, w);
    for (int64_t k = 0; k < K; ++k) {
      EXPECT_NEAR(s.weighted[k].item<double>(), e.wsum[k], 1e-4 * (1 + std::abs(e.wsum[k]))) << mode << " " << k;
      EXPECT_NEAR(s.unweighted[k].item<double>(), e.usum[k], 1e-4 * (1 + std::abs(e.usum[k])));
      EXPECT_EQ(s.count[k], e.count[k]);
    }
    EXPECT_EQ(count_valid_targets(labels, K), e.count);
  }
  // Per-token CE of head 2: zero exactly where the target is ignored, summing to the head's sum.
  at::Tensor tok = head_token_ce(logits.narrow(1, 0, S - 2).select(2, 1), labels.narrow(1, 2, S - 2));
  EXPECT_TRUE(tok.masked_select(labels.narrow(1, 2, S - 2).eq(-100)).eq(0).all().item<bool>());
  EXPECT_NEAR(tok.sum().item<double>(), per_token(logits, labels, {}, 0).usum[1], 1e-4);
}

TEST(MtpLoss, WorkedExampleAlignment) {
  // weighted_mtp's worked example: S = 8, prompt 0..3, solution 4..6, pad 7: every head sees targets 4, 5, 6.
  at::Tensor labels = at::full({1, 8}, -100, at::TensorOptions().dtype(at::kLong));
  labels[0].narrow(0, 4, 3).fill_(1);
  EXPECT_EQ(count_valid_targets(labels, 4), (std::vector<int64_t>{3, 3, 3, 3}));
  // Position weights: token 5 carries the same weight for every head (sources 4, 3, 2, 1).
  at::Tensor w = at::arange(8, at::TensorOptions().dtype(at::kFloat)).view({1, 8});
  for (int64_t k = 1; k <= 4; ++k) {
    at::Tensor hw = head_weights(w, k, 0, 8 - k, 4);
    EXPECT_EQ(hw[0][5 - k].item<float>(), 5.0f);
  }
  at::Tensor wh = at::arange(8 * 4, at::TensorOptions().dtype(at::kFloat)).view({1, 8, 4});
  EXPECT_EQ(head_weights(wh, 2, 0, 6, 4)[0][3].item<float>(), wh[0][3][1].item<float>());
  EXPECT_THROW(head_weights(at::ones({1, 8, 3}), 1, 0, 7, 4), Error);
}

TEST(MtpLoss, NormalizationOverContributingHeads) {
  std::vector<at::Tensor> sums = {at::tensor(6.0), at::tensor(10.0), at::tensor(0.0)};
  at::Tensor loss = mtp_loss_from_sums(sums, {3.0, 5.0, 0.0});
  EXPECT_DOUBLE_EQ(loss.item<double>(), (6.0 / 3 + 10.0 / 5) / 2);
  EXPECT_EQ(mtp_loss_from_sums(sums, {0.0, 0.0, 0.0}).item<double>(), 0.0);

  // Short sequences: heads with S - k <= 0 contribute nothing.
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(2);
  at::Tensor logits = at::randn({1, 2, 3, 5}, g);
  at::Tensor labels = at::ones({1, 2}, at::TensorOptions().dtype(at::kLong));
  MtpCeSums s = mtp_ce_sums(logits, labels, {});
  EXPECT_EQ(s.count, (std::vector<int64_t>{1, 0, 0}));
  MtpCeMean mean = mtp_ce_mean(logits, labels, {});
  EXPECT_NEAR(mean.weighted.item<double>(), s.weighted[0].item<double>(), 1e-7);
}

TEST(MtpLoss, Bf16LogitsUseFp32SoftmaxAndMaskedNonFiniteWeightsAreIgnored) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(4);
  at::Tensor logits = (at::randn({2, 6, 1, 50}, g) * 8).to(at::kBFloat16);
  at::Tensor labels = at::randint(50, {2, 6}, g, at::TensorOptions().dtype(at::kLong));
  labels[0][3] = -100;
  at::Tensor w = at::rand({2, 6}, g);
  w[0][3] = INFINITY;  // on an ignored target
  MtpCeSums lo = mtp_ce_sums(logits, labels, w);
  MtpCeSums hi = mtp_ce_sums(logits.to(at::kFloat), labels, w);
  EXPECT_EQ(lo.weighted[0].scalar_type(), at::kFloat);
  EXPECT_EQ(lo.weighted[0].item<double>(), hi.weighted[0].item<double>());
  EXPECT_TRUE(std::isfinite(lo.weighted[0].item<double>()));
}

}  // namespace
}  // namespace wmtp
