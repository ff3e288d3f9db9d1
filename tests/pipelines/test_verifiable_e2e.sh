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
#     input error naming the key (exit 2); with the keys reset to a fresh EMA (weighted_mtp, which
#     never saved it) the run resumes and step 11 onwards differ from the reference.
#  5. merge-lora of the final checkpoint, convert-checkpoint export (HF safetensors, PEFT adapters).
#  6. identities. Both trainers record their base's fingerprint in /lora; merge-lora and PEFT import
#     onto another model of the same shapes, and a LoRA resume on another init_weights, exit 2 naming
#     both fingerprints. The critic's adapters merged onto their base make a critic train-verifiable
#     uses (its losses equal those with the adapters-only critic). A resume whose critic directory
#     gained a newer checkpoint exits 2 naming both files and fingerprints, unless
#     verifiable.resume_with_other_critic; the same critic moved elsewhere resumes. An adapters-only
#     critic whose base file was replaced, and a critic trained on another tokenizer, exit 2 naming
#     both. A critic path that exists on one rank only (mpirun MPMD: a node-local path) ends in
#     seconds with exit 2 and one message instead of a hang.
# WMTP_EDIT_TRAIN_STATE: the test-only tool that edits /train (tests/train/edit_train_state.cpp).
set -u
EDIT=${WMTP_EDIT_TRAIN_STATE:?path of the edit_train_state test tool}
source "$(dirname "${BASH_SOURCE[0]}")/../train/e2e_lib.sh"
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
PROGRAM=train-verifiable  # run NAME NP [args...] (e2e_lib.sh): checkpoints and metrics under $TMP/NAME
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
# Host reads per step: one — the GAE, the weights and their sums run on the device, and every figure is read
# with the gradient norm (train_step).
host_syncs ref 1 && ok "one host sync per step" || bad "host syncs per step: a read of a device value came back"
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

# 6. identities
fingerprint() { "$BIN/convert-checkpoint" inspect "$1" 2>/dev/null | sed -n 's/^fingerprint: //p'; }
recorded_base() { "$BIN/convert-checkpoint" inspect "$1" 2>/dev/null | grep -A1 '^lora:' | grep -o 'fnv1a64:[0-9a-f]*'; }
refused() {  # refused NAME RC LOG PATTERN...: exit RC == 2 and every PATTERN in LOG
  local name=$1 rc=$2 log=$3; shift 3
  local p; for p in "$@"; do grep -q -- "$p" "$log" || { bad "$name: exit $rc, no '$p' in the output"; tail -5 "$log"; return; }; done
  if [ "$rc" = 2 ]; then ok "$name"; else bad "$name: exit $rc, want 2"; tail -5 "$log"; fi
}
critic_file="$TMP/critic/ckpt/$(cat "$TMP/critic/ckpt/latest")"
base_fp=$(fingerprint "$TMP/merged_base.h5"); other="$TMP/merged.h5"; other_fp=$(fingerprint "$other")
if [ -n "$base_fp" ] && [ "$base_fp" != "$other_fp" ] && [ "$(recorded_base "$critic_file")" = "$base_fp" ] \
   && [ "$(recorded_base "$final")" = "$base_fp" ]; then ok "train-critic and train-verifiable record their base's fingerprint"
else bad "/lora base_fingerprint: critic '$(recorded_base "$critic_file")', policy '$(recorded_base "$final")', base '$base_fp'"; fi

"$BIN/merge-lora" --base "$other" --lora "$final" --output "$TMP/wrong_merge.h5" > "$TMP/wrong_merge.log" 2>&1
refused "merge-lora onto another base" $? "$TMP/wrong_merge.log" "$base_fp" "$other_fp" "ignore-fingerprint"
[ -e "$TMP/wrong_merge.h5" ] && bad "the refused merge left $TMP/wrong_merge.h5"
"$BIN/convert-checkpoint" import --from peft --input "$TMP/peft" --base "$other" --output "$TMP/wrong_peft.h5" > "$TMP/wrong_peft.log" 2>&1
refused "PEFT import onto another base" $? "$TMP/wrong_peft.log" "$base_fp" "$other_fp"
if "$BIN/merge-lora" --base "$TMP/merged_base.h5" --lora "$final" --output "$TMP/right_merge.h5" > "$TMP/right_merge.log" 2>&1 \
   && "$BIN/convert-checkpoint" import --from peft --input "$TMP/peft" --base "$TMP/merged_base.h5" --output "$TMP/right_peft.h5" > "$TMP/right_peft.log" 2>&1
then ok "merge-lora and PEFT import onto the recorded base"; else bad "merge/import onto the right base"; tail -3 "$TMP/right_merge.log" "$TMP/right_peft.log"; fi
resume_from_copy otherbase
run otherbase 2 --set training.init_weights="$other"
refused "LoRA resume on another init_weights" $? "$TMP/otherbase.log" "$base_fp" "$other_fp"

# The critic's adapters merged onto their MTP base: the critic itself (n_future_tokens = 1, value head).
short=(--set training.max_steps=2 --set checkpoint.every=0 --set checkpoint.save_final=false --set data.valid="")
if "$BIN/merge-lora" --base "$TMP/merged_base.h5" --lora "$critic_file" --output "$TMP/critic_merged.h5" > "$TMP/critic_merge.log" 2>&1 \
   && run merged_critic 2 "${short[@]}" --set verifiable.critic="$TMP/critic_merged.h5" \
   && run adapters_critic 2 "${short[@]}"; then
  python3 - "$TMP/merged_critic/metrics.jsonl" "$TMP/adapters_critic/metrics.jsonl" <<'PY' && ok "merged critic: train-verifiable runs, losses equal the adapters-only critic's" || bad "merged critic's losses"
import json, sys
def steps(p): return {r["step"]: r for r in map(json.loads, open(p)) if "train/weighted_ce_loss" in r}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
assert sorted(a) == sorted(b) == [1, 2], (sorted(a), sorted(b))
for s in (1, 2):
    for k in ("train/weighted_ce_loss", "td/mean", "weight/std"):
        x, y = a[s][k], b[s][k]
        assert abs(x - y) <= 1e-4 * max(1.0, abs(y)), (s, k, x, y)
print("step 2 weighted CE", a[2]["train/weighted_ce_loss"], "vs", b[2]["train/weighted_ce_loss"])
PY
  grep -q "records no tokenizer fingerprint" "$TMP/merged_critic.log" && bad "the merged critic lost its tokenizer fingerprint"
else bad "merged critic"; tail -5 "$TMP/critic_merge.log" "$TMP/merged_critic.log" "$TMP/adapters_critic.log"; fi

# Resume against another critic: the step-10 copy was trained against $critic_file.
mkdir -p "$TMP/critic2/ckpt"; cp "$critic_file" "$TMP/critic2/ckpt/"; cp "$TMP/critic/ckpt/latest" "$TMP/critic2/ckpt/"
resume_from_copy movedcritic
run movedcritic 2 --set verifiable.critic="$TMP/critic2/ckpt" --set training.stop_after_steps=1; rc=$?
if [ $rc = 75 ] && grep -q "resumed from" "$TMP/movedcritic.log"; then ok "resume with the same critic moved elsewhere"
else bad "resume with the moved critic: exit $rc"; tail -5 "$TMP/movedcritic.log"; fi
cp "$TMP/critic_merged.h5" "$TMP/critic2/ckpt/step_00000030.h5"; echo step_00000030.h5 > "$TMP/critic2/ckpt/latest"
merged_fp=$(fingerprint "$TMP/critic_merged.h5")
resume_from_copy newcritic
run newcritic 2 --set verifiable.critic="$TMP/critic2/ckpt" --set training.stop_after_steps=1
refused "resume after the critic's directory moved on" $? "$TMP/newcritic.log" "$critic_file" "step_00000030.h5" "$merged_fp" \
  "verifiable.resume_with_other_critic"
run newcritic 2 --set verifiable.critic="$TMP/critic2/ckpt" --set training.stop_after_steps=1 \
  --set verifiable.resume_with_other_critic=true; rc=$?
if [ $rc = 75 ] && grep -q "resuming with another critic" "$TMP/newcritic.log"; then ok "verifiable.resume_with_other_critic resumes, with a warning"
else bad "resume_with_other_critic: exit $rc"; tail -5 "$TMP/newcritic.log"; fi

# The adapters-only critic's base replaced by another model of the same shapes.
cp "$TMP/merged_base.h5" "$TMP/base_backup.h5"; cp "$other" "$TMP/merged_base.h5"
run replacedbase 2 "${short[@]}" --set training.init_weights="$TMP/base_backup.h5"; rc=$?
cp "$TMP/base_backup.h5" "$TMP/merged_base.h5"
refused "adapters-only critic on a replaced base" $rc "$TMP/replacedbase.log" "$base_fp" "$other_fp" "$critic_file"

# A critic trained on data of another tokenizer (same vocabulary size): its /train says so.
mkdir -p "$TMP/critictok" && python3 - "$DATA/train.h5" "$critic_file" "$TMP/critictok/critic.h5" <<'PY'
import re, sys
fps = set(re.findall(rb"fnv1a64:[0-9a-f]{16}", open(sys.argv[1], "rb").read()))
assert len(fps) == 1, fps
fp = fps.pop()
data = open(sys.argv[2], "rb").read()
assert data.count(fp) == 1, data.count(fp)
open(sys.argv[3], "wb").write(data.replace(fp, b"fnv1a64:0123456789abcdef"))
PY
run tokenizer 2 "${short[@]}" --set verifiable.critic="$TMP/critictok/critic.h5"
refused "critic trained on another tokenizer" $? "$TMP/tokenizer.log" "tokenized by fnv1a64:0123456789abcdef" "$DATA/train.h5"

# A critic path only one rank sees (a node-local path): one agreed error, not a hang.
start=$(date +%s)
timeout -k 10 120 $MPI -np 1 "$BIN/train-verifiable" "${common[@]}" "${short[@]}" --set checkpoint.dir="$TMP/mpmd/ckpt" \
    --set training.run_dir="$TMP/mpmd" : -np 1 "$BIN/train-verifiable" "${common[@]}" "${short[@]}" \
    --set checkpoint.dir="$TMP/mpmd/ckpt" --set training.run_dir="$TMP/mpmd" --set verifiable.critic="$TMP/rank1_only" \
    > "$TMP/mpmd.log" 2>&1; rc=$?
n_err=$(grep -c "error:" "$TMP/mpmd.log")
if [ $rc = 2 ] && [ "$n_err" = 1 ] && grep -q "rank1_only: no such" "$TMP/mpmd.log"; then
  ok "critic missing on one rank only: exit 2, one message, $(( $(date +%s) - start )) s"
else bad "critic missing on one rank only: exit $rc (124: hung), $n_err error line(s)"; tail -5 "$TMP/mpmd.log"; fi

e2e_finish
