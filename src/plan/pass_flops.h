// The work of one micro-batch, unit by unit: the FLOPs of each unit's forward, backward and
// recompute, and the elements each unit gathers and reduces — what plan/step_time.h schedules.
// Counted from the model's parameter specs, so it follows the architecture, LoRA and frozen weights:
//   - a linear layer (every 2-D weight but the token embedding's) of n elements costs 2·T·n FLOPs
//     forward for T tokens; backward 2·T·n for its input's gradient and, when the weight trains,
//     2·T·n more for the weight's (a frozen base under LoRA pays only the first; its adapters are
//     linear layers of their own);
//   - attention (per block) 2 x 2·T·seq·heads·head_dim forward (scores and values; half of it with a
//     fused causal kernel, which skips the masked half), twice that backward;
//   - the shared output projection runs once per head (n_future passes);
//   - activation checkpointing recomputes each trunk and head block's forward in its backward;
//   - embeddings, norms, the loss's softmax and the element-wise work are not counted: the matmul
//     rate they are divided by (plan/machine_profile.h) is the only rate the model has.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/pipeline.h"

namespace wmtp {

enum class UnitKind { Embedding, TrunkBlock, HeadBlock, Norm, Output, ValueHead };

struct UnitWork {
  std::string name;
  UnitKind kind = UnitKind::TrunkBlock;
  int64_t trainable_padded = 0;  // elements of the unit's flat buffers (padded to the world size)
  int64_t frozen_padded = 0;
  int64_t trainable_held = 0;  // the part of the trainable buffer a sharded rank holds: padded / group
  double forward_flops = 0;    // per micro-batch (the output unit: all heads together)
  double backward_flops = 0;
  double recompute_flops = 0;  // activation checkpointing: the forward again inside the backward
};

struct PassShape {
  int64_t rows = 1;             // sequences per micro-batch (pairs count twice)
  int64_t seq = 1;              // tokens per sequence
  bool fused_attention = true;  // a causal kernel that skips the masked half
  bool checkpointing = false;
};

// The units of `spec` in the engine's unit order, for `world_size` ranks sharding over groups of
// `group_size` (the world, or hybrid sharding's groups).
std::vector<UnitWork> unit_work(const ModelSpec& spec, int world_size, int group_size, const PassShape& shape);

}  // namespace wmtp
