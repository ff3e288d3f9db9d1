// The fused AdamW update (shard/adamw_math.h) against torch.optim.AdamW's op chain written out here
// in plain LibTorch, over several steps, several ranges, weight decay on and off; and the host
// variant on raw pointers (what an optimizer holding host shards calls) gives the same bits as the
// tensor interface.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "rel_diff.h"
#include "shard/adamw_math.h"

namespace wmtp {
namespace {

using test::rel_diff;

struct State {
  at::Tensor p, m, v;
};

// torch.optim.AdamW(foreach=False), one tensor.
void reference_step(State& s, const at::Tensor& g, const AdamWHyper& h) {
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step)), bc2 = 1.0 - std::pow(h.beta2, double(h.step));
  s.p.mul_(1 - h.lr * h.weight_decay);
  s.m.mul_(h.beta1).add_(g, 1 - h.beta1);
  s.v.mul_(h.beta2).addcmul_(g, g, 1 - h.beta2);
  s.p.addcdiv_(s.m, (s.v.sqrt() / std::sqrt(bc2)).add_(h.eps), -h.lr / bc1);
}

TEST(AdamWMath, FusedUpdateEqualsTheOpChain) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(17);
  // sizes around the parallel grain, so threads split ranges unevenly; one flat buffer carved in three
  const std::vector<int64_t> sizes = {5, 70001, 32768};
  for (double wd : {0.0, 0.1}) {
    std::vector<State> fused, ref;
    at::Tensor flat_p = at::randn({5 + 70001 + 32768}, gen), flat_m = at::zeros_like(flat_p),
               flat_v = at::zeros_like(flat_p);
    int64_t off = 0;
    for (int64_t n : sizes) {
      fused.push_back({flat_p.narrow(0, off, n), flat_m.narrow(0, off, n), flat_v.narrow(0, off, n)});
      ref.push_back({fused.back().p.clone(), at::zeros({n}), at::zeros({n})});
      off += n;
    }
    for (int64_t step = 1; step <= 4; ++step) {
      const AdamWHyper h{/*lr=*/3e-3 * double(step), 0.9, 0.95, 1e-8, wd, step};
      AdamWRanges r;
      for (size_t i = 0; i < sizes.size(); ++i) {
        at::Tensor g = at::randn({sizes[i]}, gen) * (i == 0 ? 1e-6 : 1.0);  // tiny gradients: eps matters
        r.add(fused[i].p, g, fused[i].m, fused[i].v);
        reference_step(ref[i], g, h);
      }
      adamw_update(r, h);
      for (size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_LE(rel_diff(fused[i].p, ref[i].p), 1e-6) << "wd " << wd << " step " << step << " range " << i;
        EXPECT_LE(rel_diff(fused[i].m, ref[i].m), 1e-6) << "wd " << wd << " step " << step << " range " << i;
        EXPECT_LE(rel_diff(fused[i].v, ref[i].v), 1e-6) << "wd " << wd << " step " << step << " range " << i;
      }
    }
  }
}

TEST(AdamWMath, HostVariantOnRawPointersIsTheSameUpdate) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(4);
  const int64_t n = 100003;
  at::Tensor p = at::randn({n}, gen), g = at::randn({n}, gen), m = at::randn({n}, gen), v = at::rand({n}, gen);
  at::Tensor p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
  const AdamWHyper h{1e-2, 0.9, 0.999, 1e-8, 0.01, 7};
  AdamWRanges r;
  r.add(p, g, m, v);
  adamw_update(r, h);
  adamw_update_host(p2.data_ptr<float>(), g.data_ptr<float>(), m2.data_ptr<float>(), v2.data_ptr<float>(), n, h);
  EXPECT_TRUE(at::equal(p, p2));
  EXPECT_TRUE(at::equal(m, m2));
  EXPECT_TRUE(at::equal(v, v2));
}

TEST(AdamWMath, MismatchedRangesAreRefused) {
  AdamWRanges r;
  EXPECT_THROW(r.add(at::zeros({4}), at::zeros({5}), at::zeros({4}), at::zeros({4})), Error);
  EXPECT_THROW(r.add(at::zeros({4}), at::zeros({4}, at::kDouble), at::zeros({4}), at::zeros({4})), Error);
}

}  // namespace
}  // namespace wmtp
