#!/usr/bin/env bash
# train-rho1 end to end on the bundled corpus:
#  1. the reference: train-baseline on the tiny data with one head (n_future_tokens = 1), full
#     fine-tuning, np 2 (weighted_mtp's ref-tuning).
#  2. train-rho1 (configs/tiny-rho1.toml) at np 2 for 8 steps, checkpoint every 2, reference = the
#     step-1 run's checkpoint directory: metrics carry the rho1 keys with sane values, validation
#     reports the val/* keys, the unweighted CE falls.
#  3. the same run with one rank killed by kill -9 after the step-4 checkpoint, restarted with
#     resume = "auto": losses of steps 5-8 bitwise equal to run 2 (4 of them, compared as text).
#  4. scope = "local" and normalization = "valid" run; checkpoint.save_best saves exactly after the
#     validations that improved; a reference with another vocabulary, one with 4 heads, one whose
#     checkpoint records another tokenizer, a critic (a value model), and a missing one are refused
#     with exit 2 and a message naming the problem.
#  5. one rank only (mpirun MPMD, as with a node-local path): a reference, or a config file, missing
#     on rank 1 ends in seconds with exit 2 and one message instead of a hang.
#  6. a resume after the reference's directory moved on (a newer checkpoint) exits 2 naming both
#     files, unless rho1.resume_with_other_reference (then it resumes with a warning).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../train/e2e_lib.sh"
e2e_setup rho1_e2e
data=(--set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5" --set logging.peak_tflops=1.0)

# 1. the reference model
ref=(-c "$SRC/configs/tiny.toml" "${data[@]}" --set model.n_future_tokens=1 --set model.n_layers=3
     --set lora.enabled=false --set optimizer.lr=3e-3 --set training.max_steps=12 --set checkpoint.every=0
     --set checkpoint.dir="$TMP/ref/ckpt" --set training.run_dir="$TMP/ref")
if $MPI -np 2 "$BIN/train-baseline" "${ref[@]}" > "$TMP/ref.log" 2>&1 && [ -f "$TMP/ref/ckpt/latest" ]; then
  ok "reference: train-baseline with n_future_tokens = 1 ($(cat "$TMP/ref/ckpt/latest"))"
else bad "reference run"; tail -20 "$TMP/ref.log"; fi

common=(-c "$SRC/configs/tiny-rho1.toml" "${data[@]}" --set rho1.reference="$TMP/ref/ckpt"
        --set training.max_steps=8 --set checkpoint.every=2 --set checkpoint.keep_last=0 --set logging.log_interval=1
        --set training.eval_every=4)
PROGRAM=train-rho1  # run NAME NP [args...] (e2e_lib.sh): checkpoints and metrics under $TMP/NAME

# 2. the rho1 run
if run rho1 2; then ok "train-rho1 (np 2, 8 steps)"; else bad "train-rho1 run"; tail -30 "$TMP/rho1.log"; fi
# Host reads per step: one — the global selection's 4 rounds find their buckets on the device, the
# selected counts normalize the loss there, and every figure is read with the gradient norm (train_step).
host_syncs rho1 1 && ok "one host sync per step" || bad "host syncs per step: a read of a device value came back"
python3 - "$TMP/rho1/metrics.jsonl" <<'PY' && ok "rho1 metrics and validation keys; unweighted CE falls" || bad "rho1 metrics"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "train/loss" in r]
assert [r["step"] for r in train] == list(range(1, 9)), [r["step"] for r in train]
keys = ["train/weighted_ce_loss", "train/unweighted_ce_loss", "train/selection_ratio", "train/avg_heads_per_pos",
        "train/excess_loss", "train/threshold_head_0", "weight/mean", "weight/std", "weight/min", "weight/max",
        "weight/entropy", "train/grad_norm", "train/learning_rate", "perf/mfu_pct"]
missing = [k for k in keys if k not in train[0]]
assert not missing, f"missing {missing}"
for r in train:
    assert 0.69 <= r["train/selection_ratio"] <= 0.8, r["train/selection_ratio"]
    assert r["train/loss"] == r["train/weighted_ce_loss"] and math.isfinite(r["train/loss"])
    assert 0 < r["train/avg_heads_per_pos"] <= 4
val = [r for r in rows if "val/weighted_ce_loss" in r]
assert len(val) == 2, len(val)
for k in ["val/head0_ce_loss", "val/unweighted_ce_loss", "val/excess_loss", "val/loss"]:
    assert k in val[0], k
first, last = train[0]["train/unweighted_ce_loss"], sum(r["train/unweighted_ce_loss"] for r in train[-3:]) / 3
assert last < first, (first, last)
print(f"unweighted CE {first:.4f} -> {last:.4f}, selection ratio {train[-1]['train/selection_ratio']:.3f}")
PY
grep -q "rho1: mode signed, k_percent 0.7, scope global" "$TMP/rho1.log" && ok "run log names the rho1 settings" \
  || bad "rho1 settings line"

# 3. kill -9 one rank after the step-4 checkpoint, then resume = auto
kill_one_rank train-rho1 killed 4 8
restart killed
losses rho1 | awk '$1>4' > "$TMP/a.txt"; losses killed | awk '$1>4' > "$TMP/b.txt"
if [ "$(wc -l < "$TMP/a.txt")" = 4 ] && diff "$TMP/a.txt" "$TMP/b.txt" > "$TMP/diff.txt"; then
  ok "steps 5-8 bitwise equal after kill -9 + resume"; else bad "losses differ after resume"; cat "$TMP/diff.txt" "$TMP/a.txt"; fi

# 4. the other settings, and references that must be refused
if run local 2 --set training.max_steps=2 --set rho1.scope=local --set rho1.normalization=valid --set checkpoint.every=0 \
   && grep -q "scope local, normalization valid" "$TMP/local.log"; then ok "scope local, normalization valid"
else bad "scope local run"; tail -20 "$TMP/local.log"; fi
host_syncs local 1 && ok "scope local: one host sync per step" || bad "scope local: host syncs per step"
if run local_sel 2 --set training.max_steps=2 --set rho1.scope=local --set checkpoint.every=0 \
   && host_syncs local_sel 1; then ok "scope local, normalization selected: one host sync per step (counts on the device)"
else bad "scope local, normalization selected"; tail -20 "$TMP/local_sel.log"; fi
# checkpoint.save_best: a checkpoint exactly after the validations that improved on the best so far.
# Both cases are built, not hoped for (how a loss moves from step to step is the kernels' last bits):
# a run's first validation always improves on "none yet", and no validation improves on a best of 0
# (a cross-entropy is never below it). Run 1 has one step and no other checkpoint (no cadence, no
# final one), so a resume from it needs save_best's; its best is then set to 0 (edit_train_state) and
# run 2 resumes for two more validated steps, which must save nothing: a best not restored, a
# checkpoint at every validation, or none at all each fail.
best=(--set checkpoint.every=0 --set checkpoint.save_final=false --set checkpoint.save_best=true
      --set training.eval_every=1 --set lr_schedule.type=constant)
if run best 2 "${best[@]}" --set training.max_steps=1 && [ "$(ls "$TMP/best/ckpt" | grep -c '^step_.*\.h5$')" = 1 ] \
   && "${WMTP_EDIT_TRAIN_STATE:?set by ctest}" "$TMP/best/ckpt/step_00000001.h5" set checkpoint.best_val_loss=0 \
   && run best 2 "${best[@]}" --set training.max_steps=3 && grep -q "resumed from" "$TMP/best.log"; then
  python3 - "$TMP/best" <<'PY' && ok "save_best: a checkpoint at the first validation, none below a best of 0" || bad "save_best"
import json, os, sys
d = sys.argv[1]
val = {}
for r in map(json.loads, open(d + "/metrics.jsonl")):
    if "val/unweighted_ce_loss" in r: val[r["step"]] = r["val/unweighted_ce_loss"]
saved = sorted(int(f[5:13]) for f in os.listdir(d + "/ckpt") if f.startswith("step_") and f.endswith(".h5"))
assert sorted(val) == [1, 2, 3], val
assert all(v > 0 for v in val.values()), val
assert saved == [1], (saved, val)
print("saved at", saved, "of validations", {s: round(v, 4) for s, v in sorted(val.items())})
PY
else bad "save_best runs"; ls "$TMP/best/ckpt"; tail -20 "$TMP/best.log"; fi

refuse() {  # refuse NAME PATTERN [extra args...]: exit 2 and PATTERN in the output
  local name=$1 pattern=$2; shift 2
  run "$name" 2 --set training.max_steps=2 "$@"; local rc=$?
  if [ "$rc" = 2 ] && grep -q "$pattern" "$TMP/$name.log"; then ok "refused: $name"
  else bad "$name: exit $rc"; tail -5 "$TMP/$name.log"; fi
}
$MPI -np 1 "$BIN/train-baseline" "${ref[@]}" --set model.vocab_size=600 --set training.max_steps=1 \
  --set checkpoint.dir="$TMP/ref600/ckpt" --set training.run_dir="$TMP/ref600" > "$TMP/ref600.log" 2>&1
refuse vocab "must share one tokenizer" --set rho1.reference="$TMP/ref600/ckpt"
refuse heads "n_future_tokens = 1" --set rho1.reference="$TMP/rho1/ckpt"
# The reference's checkpoint records the tokenizer of its training data: change it to another one.
mkdir -p "$TMP/reftok" && python3 - "$TMP/ref/ckpt/$(cat "$TMP/ref/ckpt/latest")" "$TMP/reftok/ref.h5" <<'PY'
import re, sys
data = open(sys.argv[1], "rb").read()
fps = set(re.findall(rb"fnv1a64:[0-9a-f]{16}", data))
assert len(fps) == 1, fps
fp = fps.pop()
open(sys.argv[2], "wb").write(data.replace(fp, b"fnv1a64:0123456789abcdef"))
PY
refuse tokenizer "tokenized by fnv1a64:0123456789abcdef" --set rho1.reference="$TMP/reftok/ref.h5"
refuse missing "\[rho1\] reference .*nowhere.h5: no such" --set rho1.reference="$TMP/nowhere.h5"
# A critic trained on the reference's backbone: a value model, no language-model head.
$MPI -np 1 "$BIN/train-critic" -c "$SRC/configs/tiny-critic.toml" "${data[@]}" --set data.valid="" \
  --set training.init_weights="$TMP/ref/ckpt/$(cat "$TMP/ref/ckpt/latest")" --set training.max_steps=1 \
  --set model.n_layers=3 --set model.n_future_tokens=1 \
  --set checkpoint.dir="$TMP/critic/ckpt" --set training.run_dir="$TMP/critic" > "$TMP/critic.log" 2>&1 \
  || { bad "train-critic for the critic-as-reference case"; tail -5 "$TMP/critic.log"; }
refuse critic_ref "is a value model (critic); the reference must be a language model" --set rho1.reference="$TMP/critic/ckpt"

# 5. failures one rank sees alone: one agreed error, exit 2, in seconds (timeout: a hang is exit 124)
one_rank_only() {  # one_rank_only NAME PATTERN RANK0_ARGS -- RANK1_ARGS
  local name=$1 pattern=$2; shift 2
  local a=() b=(); while [ "$1" != "--" ]; do a+=("$1"); shift; done; shift; b=("$@")
  local start=$(date +%s)
  timeout -k 10 120 $MPI -np 1 "$BIN/train-rho1" "${a[@]}" : -np 1 "$BIN/train-rho1" "${b[@]}" > "$TMP/$name.log" 2>&1
  local rc=$? n_err=$(grep -c "error:" "$TMP/$name.log")
  if [ $rc = 2 ] && [ "$n_err" = 1 ] && grep -q -- "$pattern" "$TMP/$name.log"; then
    ok "$name: exit 2, one message, $(( $(date +%s) - start )) s"
  else bad "$name: exit $rc (124: hung), $n_err error line(s)"; tail -5 "$TMP/$name.log"; fi
}
one=("${common[@]:2}" --set training.max_steps=2 --set checkpoint.dir="$TMP/one/ckpt" --set training.run_dir="$TMP/one")
cfg=(-c "$SRC/configs/tiny-rho1.toml")
[ "${common[0]}" = -c ] || bad "common must start with -c CONFIG"
one_rank_only "reference on rank 0 only" "rank1_only.h5: no such" "${cfg[@]}" "${one[@]}" -- \
  "${cfg[@]}" "${one[@]}" --set rho1.reference="$TMP/rank1_only.h5"
one_rank_only "config file on rank 0 only" "cannot open config file '$TMP/rank1_only.toml'" "${cfg[@]}" "${one[@]}" -- \
  -c "$TMP/rank1_only.toml" "${one[@]}"

# 6. the reference a run was trained against, recorded in its checkpoints (the reference directory
# gets a newer checkpoint between a stop and the resume)
run refid 2 --set training.max_steps=4 --set training.stop_after_steps=1; rc=$?
[ $rc = 75 ] || { bad "refid: exit $rc, want 75 (stopped after one step)"; tail -5 "$TMP/refid.log"; }
old_ref=$(cat "$TMP/ref/ckpt/latest")
$MPI -np 1 "$BIN/train-baseline" "${ref[@]}" --set training.max_steps=13 > "$TMP/ref13.log" 2>&1 \
  && [ "$(cat "$TMP/ref/ckpt/latest")" != "$old_ref" ] || { bad "a newer reference checkpoint"; tail -5 "$TMP/ref13.log"; }
refuse refid "trained against rho1.reference = $TMP/ref/ckpt/$old_ref.*now gives $TMP/ref/ckpt/$(cat "$TMP/ref/ckpt/latest").*rho1.resume_with_other_reference" \
  --set training.max_steps=4
run refid 2 --set training.max_steps=4 --set training.stop_after_steps=1 --set rho1.resume_with_other_reference=true; rc=$?
if [ $rc = 75 ] && grep -q "resuming with another reference" "$TMP/refid.log"; then ok "rho1.resume_with_other_reference resumes, with a warning"
else bad "resume_with_other_reference: exit $rc"; tail -5 "$TMP/refid.log"; fi

e2e_finish
