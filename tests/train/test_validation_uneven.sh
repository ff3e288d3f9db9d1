#!/usr/bin/env bash
# Validation over a set that does not divide evenly among the ranks, in every train-* program: 5
# validation items at micro_batch_size 1 leave one rank with a filler micro-batch at np 2 and two at
# np 3 (at np 2 the micro-batch of rank 1 is a filler while rank 0 still reads a real one). Each run
# must finish (under `timeout`: a rank that skips a collective the others enter hangs, exit 124) and
# report the validation loss of the same 5 items that one process reports (np 1, no filler).
#   train-baseline, train-rho1 (reference: a one-head train-baseline model), train-critic (pairwise
#   validation; backbone: the same model), train-verifiable (critic: the np 1 critic run's checkpoint).
# One optimizer step before the validation: the ranks' gradient sums differ only in fp32 rounding, so
# the validation losses agree to rtol 1e-6 (seen: 1.4e-8 at most); leaving out one of the 5 items moves
# them by 1e-4 (the critic, whose value head takes a large first step) to 1e-3.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_setup validation_uneven
LIMIT=${WMTP_TEST_RUN_LIMIT_S:-60}  # seconds per run: a tiny step and validation take a few, even under load
data=(--set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5" --set logging.peak_tflops=1.0)
# 6 items per step (divisible by 1, 2 and 3 ranks at micro 1), 5 validation items, one step at the full
# lr (no warm-up: the step moves the weights off their init, so the items' losses differ).
uneven=(--set data.val_n_samples=5 --set training.micro_batch_size=1 --set training.global_batch_size=6
        --set training.max_steps=1 --set lr_schedule.type=constant --set checkpoint.every=0 --set logging.log_interval=1)

# run NAME NP [args...] (e2e_lib.sh): $PROGRAM under $TMP/NAME, killed after $LIMIT s; the exit status is run's.
E2E_RUN_LIMIT=$LIMIT; common=()
# val_loss NAME: the last val/loss of $TMP/NAME/metrics.jsonl (nothing when there is none)
val_loss() {
  python3 - "$TMP/$1/metrics.jsonl" <<'PY' 2>/dev/null
import json, sys
v = [json.loads(l)["val/loss"] for l in open(sys.argv[1]) if "val/loss" in json.loads(l)]
print(repr(v[-1]))
PY
}

# The frozen models: a one-head full model (rho1's reference, the critic's backbone).
PROGRAM=train-baseline
if run ref 1 -c "$SRC/configs/tiny.toml" "${data[@]}" --set model.n_future_tokens=1 \
     --set model.n_layers=3 --set lora.enabled=false --set training.max_steps=2 --set checkpoint.every=0 \
   && [ -f "$TMP/ref/ckpt/latest" ]; then ok "one-head reference model"
else bad "one-head reference model (rc $?)"; tail -5 "$TMP/ref.log"; fi
ref_file="$TMP/ref/ckpt/$(cat "$TMP/ref/ckpt/latest" 2>/dev/null)"

# check PROGRAM ARGS...: np 1, 2, 3 of PROGRAM; the np 2 and np 3 validation losses equal np 1's. After a
# hang the larger world sizes of PROGRAM are not tried (they would hang too: minutes for nothing).
check() {
  local prog=$1; shift
  local np rc v1 v
  for np in 1 2 3; do
    PROGRAM=$prog run "${prog}_np$np" "$np" "$@" "${uneven[@]}"
    rc=$?
    if [ "$rc" != 0 ]; then
      if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        bad "$prog np $np: hung (killed after $LIMIT s)"; tail -2 "$TMP/${prog}_np$np.log"; return
      fi
      bad "$prog np $np: exit $rc"; grep -E "error|validation" "$TMP/${prog}_np$np.log" | head -5
      continue
    fi
    v=$(val_loss "${prog}_np$np")
    [ -n "$v" ] || { bad "$prog np $np: no val/loss in metrics.jsonl"; continue; }
    if [ "$np" = 1 ]; then v1=$v; ok "$prog np 1: val/loss $v"; continue; fi
    if [ -n "${v1:-}" ] && rel_diff "$v" "$v1" 1e-6 > /dev/null; then ok "$prog np $np: val/loss $v = np 1's"
    else bad "$prog np $np: val/loss $v, np 1 gave ${v1:-nothing}"; fi
  done
}

check train-baseline -c "$SRC/configs/tiny.toml" "${data[@]}"
check train-rho1 -c "$SRC/configs/tiny-rho1.toml" "${data[@]}" --set rho1.reference="$TMP/ref/ckpt"
check train-critic -c "$SRC/configs/tiny-critic.toml" "${data[@]}" --set training.init_weights="$ref_file" \
  --set critic.value_head_lr=0.1 --set model.n_layers=3 --set model.n_future_tokens=1
check train-verifiable -c "$SRC/configs/tiny-verifiable.toml" "${data[@]}" --set training.init_weights="" \
  --set verifiable.critic="$TMP/train-critic_np1/ckpt"

e2e_finish
