// Sanity: the tiny model memorizes one repeated batch — AdamW on the LocalParams leaves, 50 steps,
// the loss must fall by more than half (sequential unembedding + activation checkpointing on).
#include <gtest/gtest.h>

#include <torch/optim/adamw.h>

#include "model/mtp_loss.h"
#include "model/mtp_pass.h"
#include "model_test_util.h"

namespace wmtp {
namespace {

TEST(Overfit, OneBatchLossHalvesIn50AdamWSteps) {
  ModelArgs a = test::tiny_args(1, 2);
  MtpModel m(a);
  LocalParams src = test::make_local(m, 0);
  MtpBatch b;
  b.tokens = test::random_tokens(4, 16, a.vocab_size, 1);
  b.labels = test::prompt_masked_labels(b.tokens, 1);
  auto c = count_valid_targets(b.labels, a.n_future_tokens);
  std::vector<double> counts(c.begin(), c.end());
  torch::optim::AdamW opt(src.trainable_params(), torch::optim::AdamWOptions(3e-3).weight_decay(0.0));
  MtpPassOptions so;
  so.activation_checkpointing = true;
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    last = mtp_forward_backward(m, src, b, counts, so).loss;
    if (step == 0) first = last;
    opt.step();
  }
  std::printf("[ overfit ] loss %.4f -> %.4f\n", first, last);
  EXPECT_LT(last, 0.5 * first);
}

}  // namespace
}  // namespace wmtp
