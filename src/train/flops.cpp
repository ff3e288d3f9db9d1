// FLOP accounting for MFU and the start-up peak measurement.
#include "train/flops.h"

#include <ATen/ATen.h>

#include "core/timer.h"

namespace wmtp {

double train_flops_per_token(const ModelArgs& a, int64_t seq_len) {
  const double dim = double(a.dim), hd = double(a.head_dim()), kv = double(a.kv_heads());
  const double hidden = double(ffn_hidden_dim(a));
  const double attn = dim * dim * 2 + 2 * dim * kv * hd;  // wq, wo + wk, wv
  const double ffn = 3 * dim * hidden;
  const double block = attn + ffn;
  const double output = dim * double(a.vocab_size);
  const double trunk = double(a.n_trunk_blocks()) * block;
  const double heads = double(a.n_future_tokens) * (block + output);
  const double layers = double(a.n_trunk_blocks() + a.n_future_tokens);
  return 6.0 * (trunk + heads) + 12.0 * layers * dim * double(seq_len);
}

double measure_peak_flops(at::ScalarType dtype, double seconds) {
  const int64_t n = 1024;
  at::Tensor a = at::randn({n, n}).to(dtype);
  at::Tensor b = at::randn({n, n}).to(dtype);
  at::mm(a, b);  // warm-up (oneDNN kernel selection)
  Timer t;
  int64_t iters = 0;
  while (t.seconds() < seconds || iters < 3) {
    at::mm(a, b);
    ++iters;
  }
  return 2.0 * double(n) * double(n) * double(n) * double(iters) / t.seconds();
}

}  // namespace wmtp
