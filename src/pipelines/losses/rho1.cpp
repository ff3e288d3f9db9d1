// Rho-1 excess loss and selection (global radix selection, local interpolated quantile).
#include "pipelines/losses/rho1.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/labels.h"
#include "comm/communicator.h"

namespace wmtp {

void validate_rho1_config(const Rho1Config& cfg) {
  if (!(cfg.k_percent > 0.0 && cfg.k_percent <= 1.0))
    throw_usage("[rho1] k_percent = ", cfg.k_percent, ": expected a fraction in (0, 1] (0.7 keeps 70% of the tokens)");
  if (cfg.reference.empty())
    throw_usage(
        "[rho1] reference: no reference model given (a wmtp checkpoint of an n_future_tokens = 1 model: "
        "train-baseline with --set model.n_future_tokens=1 on correct solutions, or convert-checkpoint import)");
}

at::Tensor head_valid_mask(const at::Tensor& labels, int64_t n_heads) {
  const int64_t B = labels.size(0), S = labels.size(1);
  at::Tensor valid = at::zeros({B, S, n_heads}, labels.options().dtype(at::kBool));
  for (int64_t k = 1; k <= n_heads && k < S; ++k)
    valid.narrow(1, 0, S - k).select(2, k - 1).copy_(labels.narrow(1, k, S - k).ne(kIgnoreIndex));
  return valid;
}

Rho1Excess rho1_excess_loss(const at::Tensor& policy_ce, const at::Tensor& ref_ce, const at::Tensor& labels,
                            ExcessMode mode) {
  if (policy_ce.dim() != 3 || labels.dim() != 2 || policy_ce.size(0) != labels.size(0) ||
      policy_ce.size(1) != labels.size(1))
    throw_usage("rho1 excess loss: policy CE must be [B, S, K] over labels [B, S], got ", policy_ce.sizes(), " and ",
                labels.sizes());
  at::Tensor ref = ref_ce.dim() == 3 ? ref_ce.squeeze(2) : ref_ce;
  if (ref.sizes() != labels.sizes())
    throw_usage("rho1 excess loss: reference CE must be [B, S] (a next-token model), got ", ref_ce.sizes());
  const int64_t S = labels.size(1), K = policy_ce.size(2);
  Rho1Excess out;
  out.valid = head_valid_mask(labels, K);
  out.excess = at::zeros(policy_ce.sizes(), policy_ce.options().dtype(at::kFloat));
  for (int64_t k = 1; k <= K && k < S; ++k) {
    const int64_t L = S - k;
    at::Tensor p = policy_ce.narrow(1, 0, L).select(2, k - 1).to(at::kFloat);
    at::Tensor r = ref.narrow(1, k - 1, L).to(at::kFloat);  // same target token t+k, seen from t+k-1
    at::Tensor e = mode == ExcessMode::Signed ? p - r : mode == ExcessMode::Absolute ? (p - r).abs() : r;
    at::Tensor m = out.valid.narrow(1, 0, L).select(2, k - 1);
    // where(), so a non-finite value at an ignored position cannot leak into the selection.
    out.excess.narrow(1, 0, L).select(2, k - 1).copy_(at::where(m, e, at::zeros({}, e.options())));
  }
  return out;
}

namespace {

// x rounded down, x within 1e-9 of an integer taken as that integer (decimal fractions such as 0.7
// are not exact in binary: 0.7 * 10 must count as 7, not 6.999...).
double snapped(double x) {
  const double r = std::round(x);
  return std::abs(x - r) < 1e-9 ? r : x;
}

}  // namespace

int64_t rho1_keep_count(int64_t n_valid, double k_percent) {
  if (n_valid <= 0) return 0;
  const int64_t keep = 1 + static_cast<int64_t>(std::floor(snapped(k_percent * double(n_valid - 1))));
  return std::min<int64_t>(std::max<int64_t>(keep, 1), n_valid);
}

// IEEE-754 binary32: flipping the sign bit of non-negatives and every bit of negatives maps the
// float order onto the unsigned integer order.
at::Tensor float_order_keys(const at::Tensor& values) {
  at::Tensor f = values.to(at::kFloat).contiguous();
  f = at::where(f == 0, at::zeros({}, f.options()), f);  // -0 -> +0
  at::Tensor bits = f.view(at::kInt).to(at::kLong).bitwise_and(int64_t(0xFFFFFFFF));
  const int64_t sign = 0x80000000;
  return at::where(bits.ge(sign), at::full({}, int64_t(0xFFFFFFFF), bits.options()) - bits, bits + sign);
}

float float_from_order_key(int64_t key) {
  const uint32_t k = static_cast<uint32_t>(key);
  const uint32_t bits = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace {

int64_t n_heads_of(const std::vector<Rho1Excess>& mbs) {
  int64_t K = 0;
  for (const auto& m : mbs) {
    if (m.excess.dim() != 3 || m.valid.sizes() != m.excess.sizes())
      throw_usage("rho1 selection: excess and valid must be [B, S, K] alike, got ", m.excess.sizes(), " and ",
                  m.valid.sizes());
    if (K && m.excess.size(2) != K) throw_usage("rho1 selection: micro-batches disagree on the number of heads");
    K = m.excess.size(2);
  }
  return K;
}

// snapped() and rho1_keep_count() element-wise on a tensor, in the same double arithmetic.
at::Tensor snapped(const at::Tensor& x) {
  const at::Tensor r = x.round();  // half to even where std::round goes away from zero: both then keep x
  return at::where((x - r).abs() < 1e-9, r, x);
}

at::Tensor keep_counts(const at::Tensor& n_valid, double k_percent) {
  const at::Tensor keep = snapped((n_valid - 1).to(at::kDouble) * k_percent).floor().to(at::kLong) + 1;
  return at::where(n_valid.gt(0), at::minimum(keep.clamp_min(1), n_valid), at::zeros_like(n_valid));
}

// float_from_order_key() element-wise: [K] int64 keys -> float32.
at::Tensor floats_from_order_keys(const at::Tensor& keys) {
  const int64_t sign = 0x80000000;
  at::Tensor bits = at::where(keys.ge(sign), keys - sign, int64_t(0xFFFFFFFF) - keys);
  bits = at::where(bits.ge(sign), bits - (int64_t(1) << 32), bits);  // as int32's two's complement
  return bits.to(at::kInt).view(at::kFloat);
}

// [B, S, K] -> [K, B*S]: one row per head.
at::Tensor by_head(const at::Tensor& t, int64_t K) { return t.reshape({-1, K}).t(); }

}  // namespace

std::vector<Rho1HeadSelection> Rho1Selection::read_heads() const {
  const int64_t K = n_valid.numel();
  const at::Tensor thr = threshold.defined() ? threshold.to(at::kDouble)
                                             : at::zeros({K}, n_valid.options().dtype(at::kDouble));
  const at::Tensor h = at::stack({n_valid.to(at::kDouble), keep.to(at::kDouble), selected.to(at::kDouble), thr}).cpu();
  std::vector<Rho1HeadSelection> out(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    Rho1HeadSelection& o = out[size_t(k)];
    o.n_valid = int64_t(h[0][k].item<double>()), o.keep = int64_t(h[1][k].item<double>());
    o.selected = int64_t(h[2][k].item<double>()), o.threshold = h[3][k].item<double>();
  }
  return out;
}

Rho1Selection rho1_select_global(const std::vector<Rho1Excess>& mbs, int64_t K, double k_percent, Communicator* comm) {
  if (!mbs.empty() && n_heads_of(mbs) != K)
    throw_usage("rho1 selection: excess has ", n_heads_of(mbs), " heads, expected ", K);
  const at::TensorOptions dev = mbs.empty() ? at::TensorOptions() : mbs.front().excess.options();
  const at::TensorOptions lopt = dev.dtype(at::kLong);

  // This rank's candidates per head: every token of every micro-batch, [K, N] keys; `live` marks
  // the valid ones still sharing the prefix found so far (a mask, not a selection: no shape that
  // depends on the data, so nothing waits for the device).
  std::vector<at::Tensor> key_parts, valid_parts;
  for (const auto& m : mbs) {
    key_parts.push_back(by_head(float_order_keys(m.excess), K));
    valid_parts.push_back(by_head(m.valid, K));
  }
  const at::Tensor keys = key_parts.empty() ? at::empty({K, 0}, lopt) : at::cat(key_parts, 1);
  at::Tensor live = valid_parts.empty() ? at::empty({K, 0}, dev.dtype(at::kBool)) : at::cat(valid_parts, 1);

  // Radix selection, most significant byte first, per head: remaining = rank (1-based, from the
  // top) of the wanted value among the live candidates; above = values greater than it.
  at::Tensor prefix = at::zeros({K}, lopt), above = at::zeros({K}, lopt), equal, remaining, n_valid, keep;
  for (int round = 0; round < 4; ++round) {
    const int shift = 24 - 8 * round;
    if (round > 0) live = live.logical_and(keys.bitwise_right_shift(shift + 8).eq(prefix.unsqueeze(1)));
    at::Tensor hist = at::zeros({K, 256}, lopt);
    if (keys.size(1) > 0) hist.scatter_add_(1, keys.bitwise_right_shift(shift).bitwise_and(255), live.to(at::kLong));
    if (comm) comm->all_reduce(hist, ReduceOp::Sum);
    if (round == 0) {
      n_valid = hist.sum(1);
      keep = keep_counts(n_valid, k_percent);
      remaining = keep;
    }
    // The first bucket from the top whose running count reaches `remaining` (argmax: the first).
    const at::Tensor from_top = hist.flip({1}), running = from_top.cumsum(1);
    const at::Tensor j = running.ge(remaining.unsqueeze(1)).to(at::kLong).argmax(1, /*keepdim=*/true);
    const at::Tensor greater = (running.gather(1, j) - from_top.gather(1, j)).squeeze(1);
    const at::Tensor bucket = 255 - j;
    prefix = prefix * 256 + bucket.squeeze(1);
    remaining = remaining - greater;
    above = above + greater;
    equal = hist.gather(1, bucket).squeeze(1);  // after the last byte: the exact ties
  }

  Rho1Selection sel;
  const at::Tensor has = keep.gt(0);  // a head without valid tokens selects nothing
  sel.n_valid = n_valid;
  sel.keep = keep;
  sel.selected = at::where(has, above + equal, at::zeros_like(above));
  sel.threshold = at::where(has, floats_from_order_keys(prefix), at::zeros({}, dev.dtype(at::kFloat)));
  for (const auto& m : mbs) {
    const at::Tensor chosen =
        m.valid.logical_and(float_order_keys(m.excess).ge(prefix.view({1, 1, K}))).logical_and(has.view({1, 1, K}));
    sel.weights.push_back(chosen.to(at::kFloat));
  }
  return sel;
}

Rho1Selection rho1_select_local(const std::vector<Rho1Excess>& mbs, double k_percent) {
  const int64_t K = n_heads_of(mbs);
  const at::TensorOptions lopt = (mbs.empty() ? at::TensorOptions() : mbs.front().excess.options()).dtype(at::kLong);
  Rho1Selection sel;
  sel.n_valid = at::zeros({K}, lopt), sel.keep = at::zeros({K}, lopt), sel.selected = at::zeros({K}, lopt);
  for (const auto& m : mbs) {
    const at::Tensor ex = m.excess.to(at::kDouble), valid = by_head(m.valid, K);
    const at::Tensor n = valid.sum(1);
    at::Tensor w = at::zeros(m.excess.sizes(), m.excess.options().dtype(at::kFloat));
    if (valid.size(1) > 0) {
      // Each head's valid values sorted first: the others become NaN, which sorts after every
      // number (and among the NaNs a NaN excess would bring: the first n are the valid values).
      const at::Tensor nan = at::full({}, std::numeric_limits<double>::quiet_NaN(), ex.options());
      const at::Tensor sorted = std::get<0>(at::where(valid, by_head(ex, K), nan).sort(1));
      // The interpolated quantile at 1 - k_percent (the rule of rho1.h's local scope, per head).
      const at::Tensor pos = snapped((n - 1).to(at::kDouble) * (1.0 - k_percent));
      const at::Tensor lo = pos.floor().to(at::kLong).clamp_min(0);
      const at::Tensor hi = at::minimum(lo + 1, (n - 1).clamp_min(0));
      const at::Tensor vlo = sorted.gather(1, lo.unsqueeze(1)).squeeze(1),
                       vhi = sorted.gather(1, hi.unsqueeze(1)).squeeze(1);
      const at::Tensor t = vlo + (vhi - vlo) * (pos - lo.to(at::kDouble));
      const at::Tensor chosen = m.valid.logical_and(ex.ge(t.view({1, 1, K}))).logical_and(n.gt(0).view({1, 1, K}));
      w = chosen.to(at::kFloat);
      sel.selected = sel.selected + chosen.sum(at::IntArrayRef{0, 1});
    }
    sel.n_valid = sel.n_valid + n;
    sel.keep = sel.keep + keep_counts(n, k_percent);
    sel.weights.push_back(w);
  }
  return sel;
}

}  // namespace wmtp
