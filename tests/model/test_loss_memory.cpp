// Loss-phase memory, measured: a counting CPU allocator (wrapping the default one, installed for
// the test only) records the peak of live bytes during one forward+backward. With vocab 32000,
// B = 2, S = 512, K = 4 and a tiny width, everything but the logits is negligible: the sequential
// path must peak at <= 1.5x one head's fp32 logits, the all-heads path at >= K x.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>

#include "model/mtp_loss.h"
#include "model/mtp_pass.h"
#include "model_test_util.h"

namespace wmtp {
namespace {

class CountingAllocator : public at::Allocator {
 public:
  explicit CountingAllocator(at::Allocator* inner) : inner_(inner) {}

  // Declared without `override` in both const forms: LibTorch 1.13 has `allocate(size_t) const`,
  // 2.x a non-const one plus a pure `copy_data`; each version overrides the one it declares.
  at::DataPtr allocate(size_t n) const { return count_allocate(n); }
  at::DataPtr allocate(size_t n) { return count_allocate(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
  at::DeleterFnPtr raw_deleter() const { return nullptr; }

  int64_t live() const { return live_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  at::DataPtr count_allocate(size_t n) const {
    at::DataPtr p = inner_->allocate(n);
    void* data = p.get();
    auto* rec = new Record{std::move(p), n, this};
    const int64_t now = live_.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return at::DataPtr(data, rec, &CountingAllocator::release, at::Device(at::kCPU));
  }
  struct Record {
    at::DataPtr inner;
    size_t n;
    const CountingAllocator* owner;
  };
  static void release(void* ctx) {
    auto* rec = static_cast<Record*>(ctx);
    rec->owner->live_.fetch_sub(static_cast<int64_t>(rec->n));
    delete rec;  // frees through the inner allocator's deleter
  }
  at::Allocator* inner_;
  mutable std::atomic<int64_t> live_{0}, peak_{0};
};

// Installs the counter for its lifetime; tensors allocated meanwhile must die before it does.
class ScopedCounting {
 public:
  ScopedCounting() : original_(c10::GetCPUAllocator()), counter_(original_) {
    c10::SetCPUAllocator(&counter_, kPriority);
  }
  ~ScopedCounting() { c10::SetCPUAllocator(original_, kPriority); }
  CountingAllocator& counter() { return counter_; }

 private:
  static constexpr uint8_t kPriority = 100;
  at::Allocator* original_;
  CountingAllocator counter_;
};

TEST(LossMemory, SequentialPeakIsAboutOneHeadAllHeadsIsKHeads) {
  ModelArgs a;
  a.dim = 8;
  a.n_heads = 1;
  a.n_kv_heads = 1;
  a.vocab_size = 32000;
  a.multiple_of = 8;
  a.n_future_tokens = 4;
  a.n_layers = 5;  // one trunk block
  a.max_seq_len = 512;
  MtpModel m(a);
  const int64_t B = 2, S = 512, K = 4;
  const double one_head = double(B) * S * a.vocab_size * sizeof(float);

  MtpBatch batch;
  batch.tokens = test::random_tokens(B, S, a.vocab_size, 1);
  batch.labels = test::prompt_masked_labels(batch.tokens, 1);
  auto ci = count_valid_targets(batch.labels, K);
  std::vector<double> counts(ci.begin(), ci.end());

  double peaks[2] = {0, 0}, losses[2] = {0, 0};
  for (int seq = 0; seq < 2; ++seq) {
    LocalParams src = test::make_local(m, 3);
    ScopedCounting scope;
    {
      const int64_t before = scope.counter().live();
      scope.counter().reset_peak();
      MtpPassOptions opt;
      opt.sequential_unembedding = seq == 1;
      losses[seq] = mtp_forward_backward(m, src, batch, counts, opt).loss;
      peaks[seq] = double(scope.counter().peak() - before);
    }
    src.zero_grad();  // gradients were allocated through the counter: free them before it goes
  }
  const double seq_ratio = peaks[1] / one_head, all_ratio = peaks[0] / one_head;
  std::printf("[ loss memory ] one head's logits %.1f MB; peak: sequential %.2fx, all heads %.2fx\n", one_head / 1e6,
              seq_ratio, all_ratio);
  EXPECT_NEAR(losses[0], losses[1], 1e-5 * losses[0]);
  EXPECT_LE(seq_ratio, 1.5);
  EXPECT_GE(all_ratio, double(K));
}

}  // namespace
}  // namespace wmtp
