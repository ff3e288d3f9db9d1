// Activation memory by tensor kind and the step's peak phase (plan/activation_memory.h).
#include "plan/activation_memory.h"

#include <algorithm>

namespace wmtp {

namespace {

bool targeted(const LoraConfig& l, const char* proj) {
  if (!l.enabled) return false;
  const std::vector<std::string> names = lora_target_names(l);
  return std::find(names.begin(), names.end(), proj) != names.end();
}

struct Dims {
  int64_t T, D, F, V, H, c, rows, seq;
};
Dims dims_of(const MicroBatchShape& s) {
  return Dims{s.rows * s.seq, s.args.dim, ffn_hidden_dim(s.args), s.args.vocab_size, s.args.n_heads, s.compute_bytes,
              s.rows,         s.seq};
}

int64_t big(int64_t tensor_bytes) { return tensor_bytes >= kMmapThresholdBytes ? tensor_bytes : 0; }

bool dropout_on(const MicroBatchShape& s) { return s.training && s.lora.enabled && s.lora.dropout > 0.0; }

// A block builds a graph at all: some of its weights train, or its input carries a gradient.
bool block_has_graph(const MicroBatchShape& s) { return s.base_trainable || s.lora.enabled; }

// rms_norm (transformer.cpp): x.to(fp32) kept by pow and mul (4 B even in fp32, where it is x
// itself) and 1/rms [T] fp32, when x needs a gradient; x^2 kept by mean() on LibTorch 1.x;
// normed.to(c) kept by "* weight" when the weight trains.
int64_t norm_saved(const MicroBatchShape& s, bool input_needs_grad) {
  const Dims d = dims_of(s);
  int64_t b = s.base_trainable ? d.c * d.T * d.D : 0;
  if (input_needs_grad) b += 4 * d.T * d.D + 4 * d.T + (s.mean_keeps_input ? 4 * d.T * d.D : 0);
  return b;
}

}  // namespace

std::vector<MemoryItem> BlockSaved::items() const {
  return {{"norms", norms}, {"projection inputs", inputs}, {"q, k, v", qkv}, {"attention", attention}, {"ffn", ffn},
          {"lora", lora}};
}

BlockSaved block_saved(const MicroBatchShape& s) {
  BlockSaved b;
  if (!block_has_graph(s)) return b;
  const Dims d = dims_of(s);
  const int64_t X = d.c * d.T * d.D;  // one hidden state in the compute dtype
  b.norms = 2 * norm_saved(s, /*input_needs_grad=*/true);
  // Projection inputs: a linear keeps its input for its weight's gradient — the base weight when it
  // trains, the adapter's A when targeted without dropout (with dropout A keeps the dropped copy).
  auto site_kept = [&](std::initializer_list<const char*> projs) {
    if (s.base_trainable) return true;
    for (const char* p : projs)
      if (targeted(s.lora, p) && !dropout_on(s)) return true;
    return false;
  };
  const int64_t TF = d.c * d.T * d.F;
  b.mmapped = 2 *
              (big(4 * d.T * d.D) + (s.mean_keeps_input ? big(4 * d.T * d.D) : 0) + (s.base_trainable ? big(X) : 0));
  if (site_kept({"wq", "wk", "wv"})) b.inputs += X, b.mmapped += big(X);  // xn
  if (site_kept({"w1", "w3"})) b.inputs += X, b.mmapped += big(X);        // ffn_norm output f
  if (site_kept({"w2"})) b.inputs += TF, b.mmapped += big(TF);            // silu(w1 x) * w3 x
  // q, k, v after RoPE, kept by attention; k, v at n_heads width (repeat_kv copies them, and the
  // explicit path's matmul keeps its reshaped copies of all three).
  b.qkv = 3 * X;
  b.mmapped += 3 * big(X);
  if (s.fused_attention) {
    // SDPA keeps its output (wo's input, the same storage) and a [B, H, S] fp32 log-sum-exp.
    b.attention = X + 4 * d.rows * d.H * d.seq;
    b.mmapped += big(X);
  } else {
    // softmax keeps its fp32 result, matmul the probabilities in c (the same tensor in fp32); the
    // output's [B, S, H*E] copy is wo's input, kept when wo's weight (or adapter) needs it.
    const int64_t ss = d.rows * d.H * d.seq * d.seq;
    b.attention = 4 * ss + (d.c != 4 ? d.c * ss : 0) + (site_kept({"wo"}) ? X : 0);
    b.mmapped += big(4 * ss) + (d.c != 4 ? big(d.c * ss) : 0) + (site_kept({"wo"}) ? big(X) : 0);
  }
  // SwiGLU: silu keeps w1's output, the product keeps silu's output and w3's output.
  b.ffn = 3 * TF;
  b.mmapped += 3 * big(TF);
  if (s.lora.enabled) {
    const std::vector<std::string> names = lora_target_names(s.lora);
    for (const std::string& p : names) {
      const int64_t in = p == "w2" ? d.F : d.D;
      b.lora += d.c * d.T * s.lora.rank;  // A's output, kept by B
      // lora_linear's dropout: the dropped input (kept by A) and what dropout keeps to scale its
      // gradient — a 1-byte mask on CUDA (native_dropout), the noise tensor on the CPU.
      if (dropout_on(s)) b.lora += d.c * d.T * in + (s.cuda ? 1 : d.c) * d.T * in;
    }
  }
  return b;
}

int64_t trunk_saved(const MicroBatchShape& s) {
  const int64_t n = s.args.n_trunk_blocks();
  if (n == 0 || !block_has_graph(s)) return 0;
  const int64_t first_less = s.embedding_trains ? 0 : norm_saved(s, true) - norm_saved(s, false);
  return n * block_saved(s).total() - first_less;
}

int64_t ActivationPeak::total() const {
  int64_t t = 0;
  for (const MemoryItem& i : items) t += i.bytes;
  return t;
}

int64_t ActivationPeak::heap_bytes() const {
  int64_t t = 0;
  for (const MemoryItem& i : items)
    if (i.saved) t += i.bytes - i.mmapped;
  return t;
}

namespace {

// A block's backward beyond its saved tensors: the larger of (a) the FFN moment — the incoming
// gradient and the one sent on, two [T, F] gradients beside the kept intermediates, w2's weight
// gradient; (b) the attention moment — FFN state freed, attention's gradients (fused: q, k, v grads
// + an fp32 dq accumulator; explicit: S x S gradients in fp32 and c) and the FFN + wo weight
// gradients; (c) the end — the unit's weight gradients as autograd concatenates them (split
// backward: the parts + the flat copy) and GatherFn casts the flat one to reduce_dtype, plus
// reductions still in flight (world > 1, async).
int64_t block_backward_extra(const MicroBatchShape& s, const BlockSaved& b) {
  const Dims d = dims_of(s);
  const int64_t X = d.c * d.T * d.D, P = s.unit_elements;
  const int64_t w2 = s.base_trainable ? d.c * d.D * d.F : 0;
  const int64_t ffn = 2 * X + 2 * d.c * d.T * d.F + w2;
  int64_t attn_grads = 0;
  if (s.fused_attention) attn_grads = 3 * X + 4 * d.T * d.D;
  else
    attn_grads = (4 + d.c) * d.rows * d.H * d.seq * d.seq + 3 * X;
  const int64_t freed_ffn = b.ffn + (s.base_trainable ? d.c * d.T * d.F + X : 0);
  const int64_t weights = s.base_trainable ? d.c * (3 * d.D * d.F + d.D * d.D) : 0;
  const int64_t attn = 2 * X + attn_grads + weights - freed_ffn;
  const int64_t cast = s.reduce_bytes != d.c ? s.reduce_bytes * P : 0;
  const int64_t in_flight = (s.world_size > 1 && s.async_reduce) ? 2 * s.reduce_bytes * P : 0;
  const int64_t end = X + std::max(2 * d.c * P, d.c * P + cast) + in_flight - b.total();
  return std::max({ffn, attn, end, int64_t(0)});
}

// Rows of the largest CE chunk: positions per chunk x rows (mtp_pass.cpp), at most the head's targets.
int64_t chunk_rows(const MicroBatchShape& s) {
  const int64_t k = 1, positions = s.loss_chunk > 0 ? s.loss_chunk : std::max<int64_t>(1, (s.seq - k + 3) / 4);
  return std::min(positions, std::max<int64_t>(1, s.seq - k)) * s.rows;
}

// One CE chunk of the sequential unembedding (mtp_pass.cpp, output_chunk) at its largest moment:
// the rows (index_select), their norm (fp32 copy, 1/rms, normalized, output), the logits buffer every
// chunk of a head reuses (compute dtype, plus its fp32 copy below fp32) in which the softmax and the
// logit gradient are formed in place, then the gradient's products: the rows' gradient and, when the
// output weight trains, its partial product (below fp32: the compute-dtype product and its fp32 copy;
// in fp32 the first chunk's product becomes the sum, later ones add into it in place); the fp32 sum
// of the output weight's gradient from earlier chunks beside them.
std::vector<MemoryItem> ce_chunk(const MicroBatchShape& s, int64_t n, bool earlier_chunks) {
  const Dims d = dims_of(s);
  const bool bf = d.c != 4;
  const int64_t nD = n * d.D, nV = n * d.V, VD = d.V * d.D;
  const bool out_trains = s.output_elements > 0;
  std::vector<MemoryItem> items;
  items.push_back({"CE rows and their norm", d.c * nD + (bf ? 4 * nD : 0) + 4 * n + (s.mean_keeps_input ? 4 * nD : 0) +
                                                 (s.base_trainable ? d.c * nD : 0) + d.c * nD});
  items.push_back({"logits buffer (+ fp32 copy), reused by every chunk", d.c * nV + (bf ? 4 * nV : 0),
                   big(d.c * nV) + (bf ? big(4 * nV) : 0)});
  const int64_t rows_grad = d.c * nD;
  int64_t partial = 0, partial_big = 0;
  if (out_trains && bf) partial = d.c * VD + 4 * VD, partial_big = big(d.c * VD) + big(4 * VD);
  if (out_trains && !bf && !earlier_chunks) partial = 4 * VD, partial_big = big(4 * VD);
  items.push_back(
      {"rows' gradient + output-weight partial product", rows_grad + partial, big(rows_grad) + partial_big});
  if (out_trains && earlier_chunks) items.push_back({"output-weight gradient sum (fp32)", 4 * VD, big(4 * VD)});
  return items;
}

// Gathered parameters alive in a phase: `blocks` block units and the output unit when `output`
// (full_shard: what the engine holds then — the unit computing, the prefetched ones, a pinned one);
// shard_grad_op keeps every unit from its forward to its backward.
MemoryItem gathered(const MicroBatchShape& s, int64_t blocks, bool output) {
  if (s.gathered_all > 0) return {"gathered parameters (every unit: shard_grad_op)", s.gathered_all};
  const int64_t b = blocks * s.gathered_block + (output ? s.gathered_output : 0);
  return {"gathered parameters (" + std::to_string(blocks) + " block unit(s)" + (output ? " + output" : "") + ")", b};
}

ActivationPeak best(std::vector<ActivationPeak> phases) {
  return *std::max_element(phases.begin(), phases.end(),
                           [](const ActivationPeak& a, const ActivationPeak& b) { return a.total() < b.total(); });
}

ActivationPeak sequential_peak(const MicroBatchShape& s) {
  const Dims d = dims_of(s);
  const BlockSaved b = block_saved(s);
  const int64_t A = b.total(), X = d.c * d.T * d.D, VD = d.V * d.D;
  const int64_t n_trunk = s.args.n_trunk_blocks(), K = s.args.n_future_tokens;
  const bool graph = block_has_graph(s);
  const std::string per = s.checkpointing ? "inputs kept by activation checkpointing" : "saved for backward";
  const MemoryItem trunk{"trunk activations (" + std::to_string(n_trunk) + " blocks, " + per + ")",
                         s.checkpointing ? (graph ? n_trunk * X : 0) : trunk_saved(s),
                         s.checkpointing ? (graph ? n_trunk * big(X) : 0) : n_trunk * b.mmapped, true};
  const MemoryItem z{"trunk output", X};
  // Heads after the first find the trunk output's gradient accumulated by the ones before.
  const MemoryItem zgrad{"trunk output gradient (from the heads)", K > 1 && graph ? X : 0};
  const int64_t extra = block_backward_extra(s, b);
  const bool out_trains = s.output_elements > 0;
  const int64_t acc = out_trains ? 4 * VD : 0;
  const int64_t pinned = s.pinned_trunk_block ? 1 : 0;
  // In fp32 the head's attention norm keeps the trunk output itself, not a copy.
  const int64_t head_saved = s.checkpointing ? 0 : A - (d.c == 4 && graph ? 4 * d.T * d.D : 0);

  ActivationPeak ce;
  ce.phase = "a head's CE chunk";
  ce.items = {gathered(s, 1 + s.prefetch_depth + pinned, true),
              trunk,
              z,
              zgrad,
              {"head block (saved for backward)", head_saved, s.checkpointing ? 0 : b.mmapped},
              {"head output", X},
              {"head output gradient (from earlier chunks)", graph ? X : 0}};
  for (MemoryItem& i : ce_chunk(s, chunk_rows(s), true)) ce.items.push_back(i);

  ActivationPeak head_bwd;
  head_bwd.phase = "a head block's backward";
  head_bwd.items = {gathered(s, 1 + s.prefetch_depth + pinned, true),
                    trunk,
                    z,
                    zgrad,
                    {"head output gradient", X},
                    {"output-weight gradient sum (fp32)", acc},
                    {std::string("head block (") + (s.checkpointing ? "recomputed" : "saved") + ")", A, b.mmapped},
                    {"block backward gradients", extra}};

  // torch::autograd::backward over (trunk output, norm, output weight): the output weight's fp32 sum
  // and its compute-dtype copy (the same tensor in fp32) stay until it returns; the output unit's
  // gradient goes first (autograd's flat copy and its reduce_dtype cast).
  const int64_t out_root = out_trains && d.c != 4 ? d.c * VD : 0;
  const int64_t out_reduce = out_trains ? d.c * VD + (s.reduce_bytes != d.c ? s.reduce_bytes * VD : 0) : 0;
  ActivationPeak trunk_start;
  trunk_start.phase = "the trunk backward's start (output-weight gradient)";
  trunk_start.items = {gathered(s, pinned + s.prefetch_depth, false),
                       trunk,
                       {"trunk output gradient", X},
                       {"output-weight gradient sum (fp32)", acc},
                       {"output-weight gradient (compute dtype)", out_root},
                       {"output unit's flat gradient + reduce cast", out_reduce}};

  ActivationPeak trunk_block;
  trunk_block.phase = "a trunk block's backward";
  trunk_block.items = {gathered(s, 1 + s.prefetch_depth, false),
                       trunk,
                       {"trunk output gradient", X},
                       {"output-weight gradient sum (fp32)", acc},
                       {"output-weight gradient (compute dtype)", out_root}};
  if (s.checkpointing) trunk_block.items.push_back({"block (recomputed)", A, b.mmapped});
  trunk_block.items.push_back({"block backward gradients", extra});
  return best({ce, head_bwd, trunk_start, trunk_block});
}

// All heads at once (mtp_pass.cpp run_all_heads): every head block saved, the final norm of the
// stacked heads, the [T, K, V] logits (or, in backward, their accumulated gradient), each head's
// fp32 log-softmax kept by nll_loss, and one head's compute-dtype slice copy and fp32 temporary.
ActivationPeak all_heads_peak(const MicroBatchShape& s) {
  const Dims d = dims_of(s);
  const BlockSaved b = block_saved(s);
  const int64_t A = b.total(), X = d.c * d.T * d.D, K = s.args.n_future_tokens;
  const int64_t n_trunk = s.args.n_trunk_blocks();
  const int64_t TKV = d.T * K * d.V, TV = d.T * d.V;
  const int64_t blocks = s.checkpointing ? (n_trunk + K) * X : trunk_saved(s) + K * A;
  const MemoryItem saved{"trunk and head blocks", blocks, s.checkpointing ? 0 : (n_trunk + K) * b.mmapped, true};
  const MemoryItem heads{"stacked heads and their norm",
                         K * X +
                             (4 + (s.mean_keeps_input ? 4 : 0) + (s.base_trainable ? d.c : 0) + d.c) * d.T * K * d.D};
  ActivationPeak loss;
  loss.phase = "the all-heads loss";
  loss.items = {gathered(s, 1 + s.prefetch_depth, true),
                saved,
                heads,
                {"log-softmax of every head (fp32)", 4 * TKV, K * big(4 * TV)},
                {"logits or their gradient", d.c * TKV, big(d.c * TKV)},
                {"one head's slice copy + fp32 temporary", d.c * TV + 4 * TV, big(d.c * TV) + big(4 * TV)}};
  if (!s.checkpointing) return loss;
  ActivationPeak block;
  block.phase = "a block's backward (all heads)";
  block.items = {gathered(s, 1 + s.prefetch_depth, false),
                 {"block inputs", (n_trunk + K) * X},
                 {"block (recomputed)", A},
                 {"block backward gradients", block_backward_extra(s, b)}};
  return best({loss, block});
}

// A value model (critic): trunk + head 0 + the final norm + the value head; the loss is per sequence.
ActivationPeak value_peak(const MicroBatchShape& s) {
  const Dims d = dims_of(s);
  const BlockSaved b = block_saved(s);
  const int64_t A = b.total(), X = d.c * d.T * d.D, blocks = s.args.n_trunk_blocks() + 1;
  const bool graph = block_has_graph(s);
  ActivationPeak p;
  p.phase = "a block's backward (value model)";
  p.items = {gathered(s, 1 + s.prefetch_depth, false),
             {"blocks (" + std::to_string(blocks) + ", " +
                  (s.checkpointing ? "inputs kept by activation checkpointing" : "saved for backward") + ")",
              s.checkpointing ? (graph ? blocks * X : 0) : trunk_saved(s) + A},
             {"final norm and value head", 4 * d.T * d.D + 2 * X}};
  if (graph) {
    if (s.checkpointing) p.items.push_back({"block (recomputed)", A});
    p.items.push_back({"block backward gradients", block_backward_extra(s, b)});
  }
  return p;
}

}  // namespace

ActivationPeak activation_peak(const MicroBatchShape& s) {
  if (s.value_head) return value_peak(s);
  if (!s.sequential) return all_heads_peak(s);
  // Trailing padding is cut before the trunk: the last position has no target (mtp_pass.cpp).
  MicroBatchShape cut = s;
  cut.seq = std::max<int64_t>(1, s.seq - 1);
  return sequential_peak(cut);
}

int64_t largest_transient(const MicroBatchShape& s) {
  const Dims d = dims_of(s);
  int64_t big = std::max<int64_t>(s.value_head ? 0 : 4 * chunk_rows(s) * d.V, 4 * s.unit_elements);
  if (s.output_elements > 0) big = std::max<int64_t>(big, 4 * d.V * d.D);
  if (!s.fused_attention) big = std::max<int64_t>(big, 4 * d.rows * d.H * d.seq * d.seq);
  if (s.value_head || !s.sequential) big = std::max<int64_t>(big, d.c * d.T * ffn_hidden_dim(s.args));
  return big;
}

}  // namespace wmtp
