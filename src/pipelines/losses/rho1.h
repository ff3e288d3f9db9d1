// Rho-1 token selection for MTP (docs/rho1.md): excess loss of
// the policy over a frozen next-token reference, per head and source position, and the binary
// selection of the top k_percent of it per head.
//
// Alignment (head k = 1..K, source position t = 0..S-k-1, target token t+k):
//   policy_ce[b, t, k-1] = CE_policy(t -> t+k)            (mtp_token_ce of the policy)
//   ref_ce[b, t']        = CE_ref(t' -> t'+1)             (mtp_token_ce of an NTP reference, head 1)
//   excess[b, t, k-1]    = policy_ce[b, t, k-1] - ref_ce[b, t+k-1]   ("signed": the reference
//                          predicts the same target from position t+k-1, with full context)
//                        | |policy - ref|  ("absolute")  | ref_ce[b, t+k-1]  ("difficult")
//   valid[b, t, k-1]     = t < S-k and labels[b, t+k] != -100
// Everything in fp32.
//
// How many tokens a head keeps: of n valid ones, keep(n) = 1 + floor(k_percent * (n - 1)), 0 when
// n = 0, in double with products within 1e-9 of an integer taken as that integer (so 0.7 of 11
// keeps 8 whatever 0.7's binary rounding does). That is exactly the count an interpolated quantile
// at level 1 - k_percent keeps from n distinct values (torch.quantile's "linear" rule, weighted_mtp's
// threshold: docs/parity.md), so `global` on one micro-batch selects what `local` selects: 0.7 keeps 7
// of 10, 8 of 11, 2 of 3, 1 of 1; k_percent = 1 keeps all.
//
// Tie rule (both scopes): a valid token is selected when its excess is >= the threshold — every
// token tied with the threshold is kept, so the selection is a function of the multiset of values
// only, whatever the order or partition of the tokens (more than keep(n) tokens when ties straddle
// the threshold). -0 and +0 compare equal; NaN sorts above +inf (a NaN excess means a NaN loss,
// which the trainer stops on).
//
// Scopes:
//   global  threshold = the keep(n)-th largest excess of the head over EVERY valid token of the
//           optimizer step (all micro-batches of all ranks): exactly what one process would select
//           on the concatenated step. Found by radix selection on the order-preserving 32-bit
//           integer image of the fp32 values: 4 rounds of one all-reduce of a [K, 256] int64
//           histogram each (8 KiB per head per round), no value leaves its rank.
//   local   per micro-batch (one rank's micro-batch, weighted_mtp's rule): threshold = the linearly
//           interpolated quantile at level 1 - k_percent of the micro-batch's valid excesses,
//           computed in double, its position (1 - k_percent)(n - 1) snapped to an integer within 1e-9
//           like keep(n) (torch computes it in the values' dtype: a boundary case may then pick the
//           other of two adjacent values).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace wmtp {

class Communicator;

// [rho1] mode, scope and normalization, in the order of their TOML names (visit() below).
enum class ExcessMode { Signed, Absolute, Difficult };
enum class Rho1Scope { Global, Local };
enum class Rho1Normalization { Selected, Valid };
inline const std::vector<std::string> kExcessModeNames = {"signed", "absolute", "difficult"};
inline const std::vector<std::string> kRho1ScopeNames = {"global", "local"};
inline const std::vector<std::string> kRho1NormalizationNames = {"selected", "valid"};

// [rho1] table.
struct Rho1Config {
  std::string reference;  // the frozen NTP reference checkpoint
  ExcessMode mode = ExcessMode::Signed;
  double k_percent = 0.7;  // fraction of each head's valid tokens kept
  Rho1Scope scope = Rho1Scope::Global;
  Rho1Normalization normalization = Rho1Normalization::Selected;
  bool resume_with_other_reference = false;

  template <class V>
  void visit(V& v) {
    v.field("reference", reference,
            "frozen next-token reference model (n_future_tokens = 1): a wmtp checkpoint file, or a checkpoint "
            "directory (its `latest`), e.g. from train-baseline with "
            "[model] n_future_tokens = 1 on correct solutions, or convert-checkpoint import of an HF/Meta LLaMA; "
            "must use the policy's tokenizer");
    v.choice("mode", mode, kExcessModeNames,
             "excess loss: signed = CE_policy - CE_ref (the paper); absolute = |CE_policy - CE_ref|; "
             "difficult = CE_ref");
    v.field("k_percent", k_percent,
            "fraction of each head's valid tokens selected, in (0, 1]: keep(n) = 1 + floor(k_percent (n - 1))");
    v.choice("scope", scope, kRho1ScopeNames,
             "global: top tokens over the whole optimizer step on every rank (exact, the paper); local: per rank "
             "and micro-batch by interpolated quantile (weighted_mtp)");
    v.choice("normalization", normalization, kRho1NormalizationNames,
             "head loss divided by the step's selected tokens (the paper) or by all valid tokens (weighted_mtp)");
    v.field("resume_with_other_reference", resume_with_other_reference,
            "resume even if `reference` now gives other weights than the run's checkpoint records (its file or "
            "fingerprint); false: such a resume is refused (exit 2), since the rest of the run would select "
            "against another model");
  }
};
// Throws Error(Usage) naming the key for k_percent outside (0, 1] or an empty reference.
void validate_rho1_config(const Rho1Config& cfg);


// Per head and source position. `excess` is 0 where `valid` is false.
struct Rho1Excess {
  at::Tensor excess;  // [B, S, K] float32
  at::Tensor valid;   // [B, S, K] bool
};
// policy_ce [B, S, K] (any float dtype; values where invalid are ignored), ref_ce [B, S] or
// [B, S, 1] (a next-token model's CE by position), labels [B, S] int64.
Rho1Excess rho1_excess_loss(const at::Tensor& policy_ce, const at::Tensor& ref_ce, const at::Tensor& labels,
                            ExcessMode mode);
// valid[b, t, k-1] = t < S-k and labels[b, t+k] != -100, as [B, S, K] bool.
at::Tensor head_valid_mask(const at::Tensor& labels, int64_t n_heads);

// keep(n) above. k_percent in (0, 1].
int64_t rho1_keep_count(int64_t n_valid, double k_percent);

// The order-preserving integer image of fp32 values: int64 keys in [0, 2^32) with
// a < b  <=>  key(a) < key(b) for non-NaN floats, key(-0) = key(+0).
at::Tensor float_order_keys(const at::Tensor& values);
float float_from_order_key(int64_t key);

// One head's outcome of a selection (global: the same on every rank; local: summed over the
// micro-batches), as read to the host by Rho1Selection::read_heads.
struct Rho1HeadSelection {
  int64_t n_valid = 0;   // valid tokens the selection ran over
  int64_t keep = 0;      // keep(n_valid)
  int64_t selected = 0;  // tokens with excess >= threshold (>= keep when ties straddle it)
  double threshold = 0;  // global: the keep-th largest; local: 0
};

// A selection made on the excess's device, nothing read back: the per-head figures stay tensors
// there ([K]), so a training step can read them with its other statistics at once.
struct Rho1Selection {
  std::vector<at::Tensor> weights;                    // per micro-batch: [B, S, K] float32, 1 = selected
  at::Tensor n_valid, keep, selected;                 // [K] int64: global: the step's over every rank; local: sums
  at::Tensor threshold;                               // [K] float32 (global; local: undefined)
  std::vector<Rho1HeadSelection> read_heads() const;  // one host read (validation, tests)
};

// Global scope over this rank's micro-batches and (when `comm` is given) every other rank's: a
// collective of exactly 4 all-reduces of [n_heads, 256] int64 on `comm` (each rank must call it,
// even with no micro-batch or no valid token). comm = nullptr: one process. Every round's bucket is
// found on the device: no host read.
Rho1Selection rho1_select_global(const std::vector<Rho1Excess>& micro_batches, int64_t n_heads, double k_percent,
                                 Communicator* comm);
// Local scope: each micro-batch on its own (no collective, no host read).
Rho1Selection rho1_select_local(const std::vector<Rho1Excess>& micro_batches, double k_percent);

}  // namespace wmtp
