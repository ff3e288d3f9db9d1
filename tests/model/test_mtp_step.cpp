// Sequential unembedding and activation checkpointing against the all-heads reference: the loss
// and every parameter gradient agree (fp32, relative 1e-5) for the three weight modes, with LoRA
// and dropout, and the checkpointed recompute re-fetches every block. Global normalization: two
// micro-batches with the step's counts equal one batch holding both.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "model/mtp_loss.h"
#include "model/mtp_pass.h"
#include "model_test_util.h"
#include "rel_diff.h"

namespace wmtp {
namespace {

using test::rel_diff;

struct StepRun {
  MtpPassResult result;
  std::map<std::string, at::Tensor> grads;
};

StepRun run_step(const MtpModel& m, uint64_t init_seed, const MtpBatch& batch, const MtpPassOptions& opt,
                 std::vector<double> counts = {}, uint64_t rng_seed = 0) {
  LocalParams src = test::make_local(m, init_seed);
  if (counts.empty()) {
    auto c = count_valid_targets(batch.labels, m.n_future());
    counts.assign(c.begin(), c.end());
  }
  at::manual_seed(rng_seed);
  StepRun r;
  r.result = mtp_forward_backward(m, src, batch, counts, opt);
  r.grads = test::grads_of(src);
  return r;
}

void expect_same(const StepRun& a, const StepRun& ref, const std::string& what) {
  EXPECT_NEAR(a.result.loss, ref.result.loss, 1e-5 * std::abs(ref.result.loss)) << what;
  for (size_t k = 0; k < ref.result.count.size(); ++k) {
    EXPECT_EQ(a.result.count[k], ref.result.count[k]) << what;
    EXPECT_NEAR(a.result.weighted_sum[k], ref.result.weighted_sum[k], 1e-5 * std::abs(ref.result.weighted_sum[k]));
    EXPECT_NEAR(a.result.unweighted_sum[k], ref.result.unweighted_sum[k],
                1e-5 * std::abs(ref.result.unweighted_sum[k]));
  }
  ASSERT_EQ(a.grads.size(), ref.grads.size()) << what;
  for (const auto& kv : ref.grads) {
    ASSERT_TRUE(a.grads.count(kv.first)) << what << " " << kv.first;
    EXPECT_LE(rel_diff(a.grads.at(kv.first), kv.second), 1e-5) << what << " " << kv.first;
  }
}

MtpBatch make_batch(const ModelArgs& a, int mode, int64_t B, int64_t S, uint64_t seed) {
  MtpBatch b;
  b.tokens = test::random_tokens(B, S, a.vocab_size, seed);
  b.labels = test::prompt_masked_labels(b.tokens, seed);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed + 100);
  if (mode == 1) b.weights = at::rand({B, S}, g) * 2;
  if (mode == 2) b.weights = at::rand({B, S, a.n_future_tokens}, g).gt(0.3).to(at::kFloat);
  return b;
}

TEST(MtpStep, SequentialEqualsAllHeadsForEveryWeightModeWithAndWithoutCheckpointing) {
  ModelArgs a = test::tiny_args(2, 3);
  MtpModel m(a);
  for (int mode = 0; mode < 3; ++mode) {
    MtpBatch batch = make_batch(a, mode, 3, 14, 10 + mode);
    MtpPassOptions ref_opt;
    ref_opt.sequential_unembedding = false;
    StepRun ref = run_step(m, 1, batch, ref_opt);
    EXPECT_GT(ref.grads.size(), 40u);
    for (int ckpt = 0; ckpt < 2; ++ckpt) {
      MtpPassOptions seq;
      seq.activation_checkpointing = ckpt == 1;
      seq.loss_chunk_size = 4;  // several chunks per head, one of them ragged
      expect_same(run_step(m, 1, batch, seq), ref, "mode " + std::to_string(mode) + " ckpt " + std::to_string(ckpt));
      MtpPassOptions all = ref_opt;
      all.activation_checkpointing = ckpt == 1;
      if (ckpt) expect_same(run_step(m, 1, batch, all), ref, "all-heads ckpt mode " + std::to_string(mode));
    }
  }
}

TEST(MtpStep, LoraWithDropoutSameAcrossPathsAndCheckpointing) {
  ModelArgs a = test::tiny_args(1, 2);
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = 4;
  lora.dropout = 0.2;  // exercises RNG preservation in the recompute
  lora.targets = {"wq", "wk", "wv", "wo", "w1", "w2", "w3"};
  MtpModel m(a, lora);
  // Non-zero B so every LoRA tensor gets a non-trivial gradient.
  auto init = m.init_params(2);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(3);
  for (auto& kv : init)
    if (kv.first.find("lora_B") != std::string::npos) kv.second = at::randn(kv.second.sizes(), g) * 0.05;
  MtpBatch batch = make_batch(a, 1, 2, 12, 4);
  auto counts_i = count_valid_targets(batch.labels, 2);
  std::vector<double> counts(counts_i.begin(), counts_i.end());
  auto run = [&](bool seq, bool ckpt, uint64_t rng) {
    LocalParams src(m.param_specs(), test::clone_params(init));
    MtpPassOptions o;
    o.sequential_unembedding = seq;
    o.activation_checkpointing = ckpt;
    at::manual_seed(rng);
    StepRun r;
    r.result = mtp_forward_backward(m, src, batch, counts, o);
    r.grads = test::grads_of(src);
    if (ckpt) {  // every block ran twice: forward, then the recompute in backward
      EXPECT_EQ(src.begin_count("layers.0"), 2);
      EXPECT_EQ(src.begin_count("extra_heads.0"), 2);
      EXPECT_EQ(src.begin_count("output"), 1);  // the shared units are fetched once per step
      EXPECT_EQ(src.begin_count("norm"), 1);
    }
    return r;
  };
  StepRun ref = run(false, false, 7);
  for (const auto& kv : ref.grads) EXPECT_NE(kv.first.find("lora_"), std::string::npos) << kv.first;
  expect_same(run(true, false, 7), ref, "seq");
  expect_same(run(true, true, 7), ref, "seq+ckpt");
  expect_same(run(false, true, 7), ref, "all+ckpt");
  // A different seed changes the dropout masks (so the equalities above are not vacuous).
  StepRun other = run(false, false, 8);
  EXPECT_GT(rel_diff(other.grads.begin()->second, ref.grads.begin()->second), 1e-4);
}

TEST(MtpStep, GlobalNormalizationAcrossMicroBatches) {
  ModelArgs a = test::tiny_args(1, 3);
  MtpModel m(a);
  MtpBatch whole = make_batch(a, 1, 4, 10, 21);
  MtpBatch first{whole.tokens.narrow(0, 0, 1), whole.labels.narrow(0, 0, 1), whole.weights.narrow(0, 0, 1)};
  MtpBatch rest{whole.tokens.narrow(0, 1, 3), whole.labels.narrow(0, 1, 3), whole.weights.narrow(0, 1, 3)};
  auto ci = count_valid_targets(whole.labels, 3);
  std::vector<double> global(ci.begin(), ci.end());
  MtpPassOptions opt;
  StepRun ref = run_step(m, 5, whole, opt, global);

  LocalParams src = test::make_local(m, 5);
  double loss = mtp_forward_backward(m, src, first, global, opt).loss;
  loss += mtp_forward_backward(m, src, rest, global, opt).loss;
  EXPECT_NEAR(loss, ref.result.loss, 1e-5 * ref.result.loss);
  for (const auto& kv : ref.grads) EXPECT_LE(rel_diff(test::grads_of(src).at(kv.first), kv.second), 1e-5) << kv.first;

  // Forward-only validation loss = the same loss with local counts, and no gradient.
  LocalParams fresh = test::make_local(m, 5);
  MtpPassResult eval = mtp_forward_loss(m, fresh, whole, opt);
  EXPECT_NEAR(eval.loss, ref.result.loss, 1e-5 * ref.result.loss);
  EXPECT_TRUE(test::grads_of(fresh).empty());
}

// The sequential path skips positions without a valid target and cuts trailing padding before the
// trunk: a batch padded far beyond its last label gives the unpadded batch's loss and gradients, and
// both equal the all-heads path, which computes every position.
TEST(MtpStep, PaddingAndIgnoredPositionsChangeNothing) {
  ModelArgs a = test::tiny_args(2, 3);
  MtpModel m(a);
  for (int mode : {0, 1, 2}) {
    MtpBatch tight = make_batch(a, mode, 3, 12, 40 + mode);
    MtpBatch padded;
    padded.tokens = at::cat({tight.tokens, at::full({3, 30}, 7, at::kLong)}, 1);
    padded.labels = at::cat({tight.labels, at::full({3, 30}, -100, at::kLong)}, 1);
    if (mode == 1) padded.weights = at::cat({tight.weights, at::full({3, 30}, NAN)}, 1);
    if (mode == 2) padded.weights = at::cat({tight.weights, at::full({3, 30, 3}, 5.0)}, 1);
    auto ci = count_valid_targets(tight.labels, 3);
    std::vector<double> counts(ci.begin(), ci.end());
    MtpPassOptions all;
    all.sequential_unembedding = false;
    const StepRun ref = run_step(m, 3, tight, all, counts);
    expect_same(run_step(m, 3, padded, MtpPassOptions{}, counts), ref,
                "padded, sequential, mode " + std::to_string(mode));
    expect_same(run_step(m, 3, padded, all, counts), ref, "padded, all heads, mode " + std::to_string(mode));
  }
}

TEST(MtpStep, HeadWithoutTokensIsSkippedInTheMeanButStillRun) {
  ModelArgs a = test::tiny_args(1, 3);
  MtpModel m(a);
  MtpBatch b = make_batch(a, 0, 2, 8, 3);
  b.labels.fill_(-100);
  b.labels.select(1, 1).fill_(5);  // only position 1 is a target: only head 1 sees it
  auto c = count_valid_targets(b.labels, 3);
  EXPECT_EQ(c, (std::vector<int64_t>{2, 0, 0}));
  LocalParams src = test::make_local(m, 1);
  MtpPassResult r = mtp_forward_backward(m, src, b, {2.0, 0.0, 0.0}, {});
  EXPECT_NEAR(r.loss, r.weighted_sum[0] / 2.0, 1e-6);
  EXPECT_EQ(src.begin_count("extra_heads.1"), 1);  // the empty head still ran
  // Its block gets an (all-zero) gradient, not a missing one.
  at::Tensor g = src.param("extra_heads.1.attention.wq.weight").grad();
  ASSERT_TRUE(g.defined());
  EXPECT_EQ(g.abs().max().item<double>(), 0.0);
}

}  // namespace
}  // namespace wmtp
