// The tiny MTP architecture the tests share. A test that needs other sizes starts from it and says
// why it changes them.
#pragma once
#include <cstdint>

#include "model/model_args.h"

namespace wmtp::test {

// dim 32, 4 heads over 2 kv heads (GQA), vocab 64, `n_future` heads on top of `trunk` trunk blocks:
// a step takes milliseconds on one CPU core.
inline ModelArgs tiny_args(int64_t trunk = 2, int64_t n_future = 3) {
  ModelArgs a;
  a.dim = 32;
  a.n_heads = 4;
  a.n_kv_heads = 2;
  a.vocab_size = 64;
  a.multiple_of = 16;
  a.n_future_tokens = n_future;
  a.n_layers = trunk + n_future;
  a.max_seq_len = 64;
  return a;
}

}  // namespace wmtp::test
