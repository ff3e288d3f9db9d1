// Activation checkpointing for one unit (LibTorch has no torch.utils.checkpoint): a custom autograd
// function whose forward runs `fn` under no-grad (keeping only its input), and whose backward runs
// `fn` again with grad enabled and back-propagates through the recomputed graph (re-entrant
// backward), accumulating into the parameters reached from inside `fn` and returning the input grad.
//
// `fn` is expected to call ParamSource::begin_unit/end_unit itself, so the recompute fetches (and,
// under the sharding engine, gathers) the unit's weights again. Consequences for a ParamSource:
//   - the forward's end_unit receives an output that does NOT require grad (it was computed under
//     no-grad): nothing will back-propagate through that forward, so no re-gather hook is wanted;
//   - the recompute's begin_unit/end_unit run inside the backward pass, and the recompute's own
//     backward follows immediately.
// Dropout inside `fn` draws the same numbers in the recompute: the default CPU (and, for CUDA input,
// CUDA) generator state is saved before the forward, restored around the recompute and put back
// afterwards, as torch.utils.checkpoint(preserve_rng_state=True) does.
// Whatever `fn` captures (ParamSource, model) must outlive the backward pass.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>

namespace wmtp {

using UnitFn = std::function<at::Tensor(const at::Tensor&)>;

// Equivalent to fn(x) in value and gradients. Without grad mode (inference) it simply calls fn(x).
// When x does not require grad (e.g. frozen embeddings under LoRA) a dummy input keeps the
// backward reachable so the unit's own parameters still get their gradients.
at::Tensor run_checkpointed(const UnitFn& fn, const at::Tensor& x, bool preserve_rng);

}  // namespace wmtp
