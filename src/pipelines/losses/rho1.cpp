// Rho-1 excess loss and selection (global radix selection, local interpolated quantile).
#include "pipelines/losses/rho1.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/labels.h"
#include "core/phase_timer.h"
#include "comm/communicator.h"

namespace wmtp {

void validate_rho1_config(const Rho1Config& cfg) {
  if (!(cfg.k_percent > 0.0 && cfg.k_percent <= 1.0))
    throw_usage("[rho1] k_percent = ", cfg.k_percent, ": expected a fraction in (0, 1] (0.7 keeps 70% of the tokens)");
  if (cfg.reference.empty())
    throw_usage("[rho1] reference: no reference model given (a wmtp checkpoint of an n_future_tokens = 1 model: "
                "train-baseline with --set model.n_future_tokens=1 on correct solutions, or convert-checkpoint import)");
  excess_mode_from(cfg.mode);
}

ExcessMode excess_mode_from(const std::string& name) {
  if (name == "signed") return ExcessMode::Signed;
  if (name == "absolute") return ExcessMode::Absolute;
  if (name == "difficult") return ExcessMode::Difficult;
  throw_usage("[rho1] mode = \"", name, "\": expected \"signed\", \"absolute\" or \"difficult\"");
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

}  // namespace

Rho1Selection rho1_select_global(const std::vector<Rho1Excess>& mbs, int64_t K, double k_percent, Communicator* comm,
                                 PhaseTimer* phases) {
  if (!mbs.empty() && n_heads_of(mbs) != K)
    throw_usage("rho1 selection: excess has ", n_heads_of(mbs), " heads, expected ", K);
  Rho1Selection sel;
  sel.heads.assign(size_t(K), {});
  at::TensorOptions dev = mbs.empty() ? at::TensorOptions() : mbs.front().excess.options();

  // This rank's candidate keys per head: every valid token of every micro-batch.
  std::vector<at::Tensor> cand(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    std::vector<at::Tensor> parts;
    for (const auto& m : mbs)
      parts.push_back(float_order_keys(m.excess.select(2, k).masked_select(m.valid.select(2, k))));
    cand[size_t(k)] = parts.empty() ? at::empty({0}, dev.dtype(at::kLong)) : at::cat(parts);
  }

  // Radix selection, most significant byte first. remaining[k] = rank (1-based, from the top) of the
  // wanted value among the candidates still sharing prefix[k]; above[k] = values greater than it.
  std::vector<int64_t> prefix(size_t(K), 0), remaining(size_t(K), 0), above(size_t(K), 0), equal(size_t(K), 0);
  for (int round = 0; round < 4; ++round) {
    const int shift = 24 - 8 * round;
    at::Tensor hist = at::zeros({K, 256}, dev.dtype(at::kLong));
    for (int64_t k = 0; k < K; ++k) {
      at::Tensor& c = cand[size_t(k)];
      if (round > 0) c = c.masked_select(c.bitwise_right_shift(shift + 8).eq(prefix[size_t(k)]));
      if (c.numel() > 0) hist[k].copy_(at::bincount(c.bitwise_right_shift(shift).bitwise_and(255), {}, 256));
    }
    if (comm) comm->all_reduce(hist, ReduceOp::Sum);
    at::Tensor h = read_to_host(phases, hist);
    auto acc = h.accessor<int64_t, 2>();
    for (int64_t k = 0; k < K; ++k) {
      Rho1HeadSelection& hs = sel.heads[size_t(k)];
      if (round == 0) {
        for (int b = 0; b < 256; ++b) hs.n_valid += acc[k][b];
        hs.keep = rho1_keep_count(hs.n_valid, k_percent);
        remaining[size_t(k)] = hs.keep;
      }
      if (hs.keep == 0) continue;
      int64_t greater = 0;
      for (int b = 255; b >= 0; --b) {
        if (greater + acc[k][b] >= remaining[size_t(k)]) {
          prefix[size_t(k)] = (prefix[size_t(k)] << 8) | b;
          remaining[size_t(k)] -= greater;
          above[size_t(k)] += greater;
          equal[size_t(k)] = acc[k][b];
          break;
        }
        greater += acc[k][b];
      }
    }
  }

  for (int64_t k = 0; k < K; ++k) {
    Rho1HeadSelection& hs = sel.heads[size_t(k)];
    if (hs.keep == 0) continue;
    hs.selected = above[size_t(k)] + equal[size_t(k)];  // after the last byte, `equal` counts exact ties
    hs.threshold = float_from_order_key(prefix[size_t(k)]);
  }
  for (const auto& m : mbs) {
    at::Tensor w = at::zeros(m.excess.sizes(), m.excess.options().dtype(at::kFloat));
    at::Tensor keys = float_order_keys(m.excess);
    for (int64_t k = 0; k < K; ++k) {
      if (sel.heads[size_t(k)].keep == 0) continue;
      at::Tensor chosen = m.valid.select(2, k).logical_and(keys.select(2, k).ge(prefix[size_t(k)]));
      w.select(2, k).copy_(chosen);
    }
    sel.weights.push_back(w);
  }
  return sel;
}

double interpolated_quantile(const at::Tensor& values, double q, PhaseTimer* phases) {
  const int64_t n = values.numel();
  WMTP_CHECK(n > 0, "quantile of no values");
  at::Tensor sorted = std::get<0>(read_to_host(phases, values.reshape({-1}).to(at::kDouble)).sort());
  const double pos = snapped(q * double(n - 1));
  const int64_t lo = static_cast<int64_t>(std::floor(pos));
  const int64_t hi = std::min<int64_t>(lo + 1, n - 1);
  const double vlo = sorted[lo].item<double>(), vhi = sorted[hi].item<double>();
  return vlo + (vhi - vlo) * (pos - double(lo));
}

Rho1Selection rho1_select_local(const std::vector<Rho1Excess>& mbs, double k_percent, PhaseTimer* phases) {
  const int64_t K = n_heads_of(mbs);
  Rho1Selection sel;
  sel.heads.assign(size_t(K), {});
  for (const auto& m : mbs) {
    at::Tensor w = at::zeros(m.excess.sizes(), m.excess.options().dtype(at::kFloat));
    for (int64_t k = 0; k < K; ++k) {
      at::Tensor mask = m.valid.select(2, k);
      at::Tensor vals = m.excess.select(2, k).masked_select(mask);
      Rho1HeadSelection& hs = sel.heads[size_t(k)];
      const int64_t n = vals.numel();
      if (n == 0) continue;
      const double t = interpolated_quantile(vals, 1.0 - k_percent, phases);
      at::Tensor chosen = mask.logical_and(m.excess.select(2, k).to(at::kDouble).ge(t));
      w.select(2, k).copy_(chosen);
      hs.n_valid += n;
      hs.keep += rho1_keep_count(n, k_percent);
      hs.selected += read_to_host(phases, chosen.sum()).item<int64_t>();
    }
    sel.weights.push_back(w);
  }
  return sel;
}

}  // namespace wmtp
