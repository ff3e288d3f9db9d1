// Activation memory of one training micro-batch, per tensor kind, modelled from what the model code
// allocates and what autograd keeps for backward — on a GPU (bf16, fused SDPA attention) as on the
// CPU (fp32 or bf16, explicit attention with its S x S scores). Pure arithmetic: no tensors, no MPI.
//
// Each term names the code it stands for (src/model/transformer.cpp, mtp_pass.cpp, lora.cpp,
// activation_checkpoint.cpp, shard/gather_fn.cpp). tests/plan/test_step_memory.cpp runs that code on
// the CPU under a counting allocator and holds every kind here to what it measured, so a change to
// what the model saves or allocates fails that test until the matching term follows it.
//
// Notation: T = rows x seq tokens, D = dim, F = FFN hidden, V = vocab, c = compute dtype bytes,
// P = elements of one unit's gathered buffer. Autograd saves an input of a product only when the
// other factor needs a gradient (LibTorch 1.13 and 2.x alike), so frozen weights (LoRA, a frozen
// backbone) change what the blocks keep.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/lora.h"
#include "model/model_args.h"

namespace wmtp {

// How one training forward/backward runs.
struct MicroBatchShape {
  ModelArgs args;
  LoraConfig lora;
  bool base_trainable = true;   // full fine-tuning (false: LoRA or a frozen backbone)
  bool value_head = false;      // a value model (critic): trunk + head 0 + norm + value head, no logits
  int64_t rows = 1;             // sequences in one forward (pairwise critic: 2 x micro-batch)
  int64_t seq = 1;              // tokens per sequence (the planned, padded length)
  int64_t compute_bytes = 2;    // bf16 2, fp32 4
  bool fused_attention = true;  // scaled_dot_product_attention (LibTorch 2.x): no S x S matrix kept
  bool cuda = false;            // dropout keeps a 1-byte mask (CPU: a compute-dtype noise tensor)
  bool checkpointing = false;
  bool sequential = true;        // sequential unembedding (else all heads' logits at once)
  int64_t loss_chunk = 0;        // [model] loss_chunk_size (0 = 4 chunks per head)
  bool training = true;          // dropout on
  bool embedding_trains = true;  // the first block's input carries a gradient
  // LibTorch 1.x: mean() keeps its input for backward (its formula's self.sym_numel() saved the whole
  // tensor; 2.x saves the number), so each RMSNorm also keeps x^2 in fp32.
  bool mean_keeps_input = false;
  int64_t unit_elements = 0;    // trainable elements of the largest block unit (its weight gradient)
  int64_t output_elements = 0;  // trainable elements of the output unit (V x D; 0 when frozen)
  int64_t reduce_bytes = 4;     // reduce_dtype bytes
  int world_size = 1;           // > 1: reductions in flight hold a unit's gradient each
  bool async_reduce = true;
  // Gathered parameters (bytes of one unit's gathered buffers): the largest block, the output unit;
  // units prefetched ahead; the last trunk block pinned gathered (sequential unembedding);
  // shard_grad_op's every unit at once (0 under full_shard).
  int64_t gathered_block = 0, gathered_output = 0, gathered_all = 0;
  int64_t prefetch_depth = 0;
  bool pinned_trunk_block = false;
};

// A named figure: "ffn intermediates" -> bytes, of which `mmapped` in tensors of at least
// kMmapThresholdBytes (which glibc maps and unmaps on their own rather than keeping in its heap).
struct MemoryItem {
  std::string name;
  int64_t bytes = 0;
  int64_t mmapped = 0;
  bool saved = false;  // blocks' activations kept from the forward until a later backward
};
// glibc's largest dynamic mmap threshold (64-bit): smaller tensors come from its heap once a freed
// mapping has raised the threshold, and freed heap memory stays with the process.
constexpr int64_t kMmapThresholdBytes = int64_t(32) << 20;

// What one block keeps for backward, by kind (grad mode, every input needing a gradient).
struct BlockSaved {
  int64_t norms = 0;      // RMSNorm: fp32 copy of the input, 1/rms, normalized values (when the weight trains)
  int64_t inputs = 0;     // projection inputs kept for their weight gradients (xn, f, w2's input)
  int64_t qkv = 0;        // q, k, v after RoPE (k, v repeated to n_heads), kept by attention
  int64_t attention = 0;  // attention output and softmax state (fused: log-sum-exp; explicit: S x S)
  int64_t ffn = 0;        // SwiGLU: w1 output, its SiLU, w3 output
  int64_t lora = 0;       // adapters: the rank-r activations, dropout masks and dropped inputs
  int64_t mmapped = 0;    // of the total, in tensors of at least kMmapThresholdBytes
  int64_t total() const { return norms + inputs + qkv + attention + ffn + lora; }
  std::vector<MemoryItem> items() const;
};
BlockSaved block_saved(const MicroBatchShape& s);
// What the trunk's blocks keep together: n_trunk x block_saved(), less what the first block's
// attention norm does not keep when its input (the embedding's output) needs no gradient.
int64_t trunk_saved(const MicroBatchShape& s);

// The peak of a step beyond the engine's persistent state: the phase where it occurs and what is
// alive then, by kind — gathered units, saved activations, loss buffers, backward transients.
// Phases (sequential unembedding): a head's CE chunk, a head's backward, the start of the trunk's
// backward, a trunk block's backward.
struct ActivationPeak {
  std::string phase;
  std::vector<MemoryItem> items;
  int64_t total() const;
  // The blocks' saved activations a CPU process's malloc heap serves (tensors glibc does not map on
  // their own) that live from the forward to a later backward — the trunk's, under sequential
  // unembedding (a head block's are freed by its own backward and reused by the next head's forward):
  // the forward lays them out, the backward frees them in reverse while its gradients (allocated on
  // autograd's thread) take the holes, so the next forward finds too few holes and the heap holds
  // about one more such set.
  int64_t heap_bytes() const;
};
ActivationPeak activation_peak(const MicroBatchShape& s);

// The largest single transient allocation of the peak phase (the caching allocator's overhead term).
int64_t largest_transient(const MicroBatchShape& s);

}  // namespace wmtp
