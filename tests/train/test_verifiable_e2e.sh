#!/usr/bin/env bash
# train-verifiable end to end on the bundled corpus (configs/tiny.toml -> tiny-critic.toml -> tiny-verifiable.toml):
#  1. the tiny chain's start: train-baseline (10 steps) merged -> runs/tiny/merged.h5's stand-in, the
#     critic's backbone and the policy's initial weights; train-critic (np 2, 20 steps, adapters-only
#     checkpoints: the critic is its LoRA applied to the base it records).
#  2. train-verifiable (tiny LoRA policy, np 2, 20 steps, checkpoint every 5): the reference run;
#     metrics.jsonl has the reference's keys (train/weighted_ce_loss, td/*, weight/*, value/mse, val/*);
#     the weights are not uniform; the step-10 checkpoint holds the TD EMA in /train.
#  3. the same run, one rank killed with kill -9 after the step-10 checkpoint, restarted with
#     resume = "auto": steps 11-20 bitwise equal to the reference (loss, EMA, weight statistics).
#  4. the EMA is what makes 3 hold: resuming the step-10 checkpoint with its EMA keys deleted is an
#     input error naming the key (exit 2); with the keys reset to a fresh EMA (the original, which
#     never saved it) the run resumes and step 11 onwards differ from the reference.
#  5. merge-lora of the final checkpoint, convert-checkpoint export (HF safetensors, PEFT adapters).
# WMTP_EDIT_TRAIN_STATE: the test-only tool that edits /train (tests/train/edit_train_state.cpp).
set -u
EDIT=${WMTP_EDIT_TRAIN_STATE:?path of the edit_train_state test tool}
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_setup verifiable_e2e
data=(--set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5" --set logging.peak_tflops=1.0)

# 1. the backbone, then the critic
if $MPI -np 2 "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" "${data[@]}" --set training.max_steps=10 \
     --set checkpoint.every=0 --set checkpoint.dir="$TMP/base/ckpt" --set training.run_dir="$TMP/base" > "$TMP/base.log" 2>&1 \
   && "$BIN/merge-lora" --base "$TMP/base/ckpt/step_00000010.h5" --output "$TMP/merged_base.h5" > "$TMP/merge_base.log" 2>&1
then ok "backbone: train-baseline (tiny, 10 steps) merged"; else bad "backbone"; tail -20 "$TMP/base.log" "$TMP/merge_base.log"; fi
if $MPI -np 2 "$BIN/train-critic" -c "$SRC/configs/tiny-critic.toml" "${data[@]}" --set training.init_weights="$TMP/merged_base.h5" \
     --set training.max_steps=20 --set checkpoint.lora_only=true --set checkpoint.dir="$TMP/critic/ckpt" \
     --set training.run_dir="$TMP/critic" > "$TMP/critic.log" 2>&1 \
   && [ -f "$TMP/critic/ckpt/$(cat "$TMP/critic/ckpt/latest" 2>/dev/null)" ]; then ok "train-critic (tiny, np 2, adapters-only)"
else bad "train-critic"; tail -20 "$TMP/critic.log"; fi

common=(-c "$SRC/configs/tiny-verifiable.toml" "${data[@]}" --set verifiable.critic="$TMP/critic/ckpt"
        --set training.init_weights="$TMP/merged_base.h5"
        --set training.max_steps=20 --set checkpoint.every=5 --set checkpoint.keep_last=0 --set logging.log_interval=1
        --set training.eval_every=10)
run() {  # run NAME NP [extra args...]: checkpoints and metrics under $TMP/NAME
  local name=$1 np=$2; shift 2
  $MPI -np "$np" "$BIN/train-verifiable" "${common[@]}" --set checkpoint.dir="$TMP/$name/ckpt" \
    --set training.run_dir="$TMP/$name" "$@" > "$TMP/$name.log" 2>&1
}
# steps NAME: "step loss ema_mean ema_std weight_mean weight_max" per step after step 10, last record
# per step wins (resumed runs append); exactly 10 lines or nothing, so two failed runs cannot compare equal.
steps() {
  python3 - "$TMP/$1/metrics.jsonl" <<'PY'
import json, sys
last = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "train/weighted_ce_loss" in r: last[r["step"]] = r
keys = ["train/weighted_ce_loss", "td/ema_mean", "td/ema_std", "weight/mean", "weight/max"]
rows = [s for s in sorted(last) if s > 10]
assert rows == list(range(11, 21)), rows
for s in rows: print(s, *(repr(last[s][k]) for k in keys))
PY
}

# 2. reference
if run ref 2; then ok "reference run (np 2, 20 steps)"; else bad "reference run"; tail -20 "$TMP/ref.log"; fi
python3 - "$TMP/ref/metrics.jsonl" <<'PY' && ok "metrics: the reference's keys; weights not uniform; EMA moves" || bad "metrics"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "train/weighted_ce_loss" in r]
keys = ["train/weighted_ce_loss", "train/unweighted_ce_loss", "train/loss_ratio", "train/grad_norm", "train/learning_rate",
        "td/mean", "td/std", "td/ema_mean", "td/ema_std", "value/mse", "weight/mean", "weight/std", "weight/min",
        "weight/max", "weight/entropy", "weight/clipping_ratio"]
missing = [k for k in keys if k not in train[0]]
assert not missing, f"missing keys {missing}"
assert [r["step"] for r in train] == list(range(1, 21)), [r["step"] for r in train]
val = [r for r in rows if "val/weighted_ce_loss" in r]
assert val and "val/unweighted_ce_loss" in val[0], "no validation record with the verifiable keys"
assert max(r["weight/std"] for r in train) > 0.05, "weights are (nearly) uniform: the critic is not weighing"
assert train[0]["td/ema_mean"] != train[-1]["td/ema_mean"], "EMA never moved"
assert all(0.1 <= r["weight/min"] <= r["weight/max"] <= 3.0 for r in train), "weights outside the clamp"
first, last = train[0]["train/unweighted_ce_loss"], sum(r["train/unweighted_ce_loss"] for r in train[-3:]) / 3
assert last < first, f"loss did not decrease: {first} -> {last}"
print(f"unweighted CE {first:.4f} -> {last:.4f}; weight std at step 20 {train[-1]['weight/std']:.3f}")
PY
if h5ls "$TMP/ref/ckpt/step_00000010.h5/train" 2>/dev/null | grep -q 'verifiable.td_ema.mean' \
   && h5ls "$TMP/ref/ckpt/step_00000010.h5/train" | grep -q 'verifiable.td_ema.step_count'; then
  ok "step-10 checkpoint holds the TD EMA in /train"; else bad "no TD EMA in /train"; h5ls -r "$TMP/ref/ckpt/step_00000010.h5/train"; fi

# 3. kill -9 one rank after the step-10 checkpoint, then resume = auto
kill_one_rank train-verifiable killed 10 20
mkdir -p "$TMP/at_kill"; cp "$TMP/killed/ckpt/step_00000010.h5" "$TMP/at_kill/"
restart killed
if diff <(steps ref) <(steps killed) > "$TMP/diff.txt"; then
  ok "steps 11-20 bitwise equal after kill -9 + resume (loss, EMA, weights)"; else bad "steps differ after resume"; cat "$TMP/diff.txt"; fi

# 4. without the EMA in the checkpoint
resume_from_copy() {  # resume_from_copy NAME: a run dir whose only checkpoint is the step-10 copy
  mkdir -p "$TMP/$1/ckpt"; cp "$TMP/at_kill/step_00000010.h5" "$TMP/$1/ckpt/"; echo step_00000010.h5 > "$TMP/$1/ckpt/latest"
}
resume_from_copy noema
"$EDIT" "$TMP/noema/ckpt/step_00000010.h5" delete verifiable.td_ema.mean verifiable.td_ema.std verifiable.td_ema.step_count
run noema 2; rc=$?
if [ "$rc" = 2 ] && grep -q "verifiable.td_ema" "$TMP/noema.log"; then ok "resume without the EMA keys: exit 2 naming the key"
else bad "resume without the EMA keys: exit $rc"; tail -5 "$TMP/noema.log"; fi
resume_from_copy fresh
"$EDIT" "$TMP/fresh/ckpt/step_00000010.h5" set verifiable.td_ema.mean=0 verifiable.td_ema.std=1 verifiable.td_ema.step_count=0
if run fresh 2; then ok "resume with a fresh EMA runs"; else bad "resume with a fresh EMA"; tail -5 "$TMP/fresh.log"; fi
python3 - <(steps ref) <(steps fresh) <<'PY' && ok "with a fresh EMA every step after the resume differs" || bad "fresh EMA did not change the run"
import sys
a = [l.split() for l in open(sys.argv[1])]; b = [l.split() for l in open(sys.argv[2])]
assert len(a) == len(b) == 10, (len(a), len(b))
same = [x[0] for x, y in zip(a, b) if x[1] == y[1]]
assert not same, f"losses equal at steps {same}"
print(f"step 11 loss {a[0][1]} (saved EMA) vs {b[0][1]} (fresh EMA)")
PY

# 5. merge the adapters into the base and export
final="$TMP/ref/ckpt/step_00000020.h5"
if "$BIN/merge-lora" --base "$final" --output "$TMP/merged.h5" > "$TMP/merge.log" 2>&1 \
   && "$BIN/convert-checkpoint" export --input "$TMP/merged.h5" --output "$TMP/export" --names hf --dtype bf16 > "$TMP/export.log" 2>&1 \
   && "$BIN/convert-checkpoint" export --input "$final" --output "$TMP/peft" --format peft > "$TMP/peft.log" 2>&1 \
   && ls "$TMP/export"/*.safetensors > /dev/null 2>&1 && [ -f "$TMP/export/config.json" ] \
   && ls "$TMP/peft"/adapter_model.safetensors > /dev/null 2>&1; then
  ok "merge-lora -> export (HF safetensors) and PEFT adapters"
else bad "merge/export"; tail -n 5 "$TMP/merge.log" "$TMP/export.log" "$TMP/peft.log"; ls "$TMP/export" "$TMP/peft"; fi

e2e_finish
