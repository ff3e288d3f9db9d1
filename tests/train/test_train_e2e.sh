#!/usr/bin/env bash
# train-baseline end to end on the bundled corpus (tiny LoRA config):
#  1. 20 steps at np 2, checkpoint every 5: the reference run; its loss decreases; metrics.jsonl
#     parses with the documented keys.
#  2. the same run, one rank killed with kill -9 after the step-10 checkpoint; restarted with
#     resume = "auto": losses of steps 11-20 bitwise equal to the reference.
#  3. resumed from that step-10 checkpoint at np 1 and np 4 (same global batch): within 1e-5 relative.
#  4. SIGUSR1 to the ranks (as Slurm's --signal does): exit 75 with a complete checkpoint, and the
#     resumed run finishes; SIGTERM to scripts/launch.sh: exit 75 with a complete checkpoint.
#  5. --dry-run and --print-config work on the same config.
#  6. full fine-tuning (LoRA off): learns faster than LoRA; stop + resume equals an uninterrupted run.
#  7. checkpoint.lora_only: small adapter-only checkpoints; stop + resume equals the LoRA reference.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_setup train_e2e
common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5"
        --set training.max_steps=20 --set checkpoint.every=5 --set checkpoint.keep_last=0 --set logging.log_interval=1
        --set logging.peak_tflops=1.0)
PROGRAM=train-baseline  # run NAME NP [args...] (e2e_lib.sh): checkpoints and metrics under $TMP/NAME

# 1. reference
if run ref 2; then ok "reference run (np 2, 20 steps)"; else bad "reference run"; cat "$TMP/ref.log"; fi
# Host reads per step: one — the MTP pass's loss sums of every micro-batch are read with the gradient norm.
host_syncs ref 1 && ok "one host sync per step" || bad "host syncs per step: a read of a device value came back"
python3 - "$TMP/ref/metrics.jsonl" <<'PY' && ok "metrics.jsonl keys; loss decreases" || bad "metrics.jsonl / loss decrease"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "train/loss" in r]
keys = ["step", "time", "train/loss", "train/grad_norm", "train/learning_rate", "train/epoch", "perf/tokens_per_sec",
        "perf/mfu_pct", "system/rss_max_gib", "perf/eta_sec"]
missing = [k for k in keys if k not in train[0]]
assert not missing, f"missing keys {missing}"
assert [r["step"] for r in train] == list(range(1, 21)), [r["step"] for r in train]
assert any("val/loss" in r for r in rows), "no validation record"
first, last = train[0]["train/loss"], sum(r["train/loss"] for r in train[-3:]) / 3
assert last < first, f"loss did not decrease: {first} -> {last}"
print(f"loss {first:.4f} -> {last:.4f}")
PY
[ -f "$TMP/ref/ckpt/step_00000020.h5" ] && [ "$(cat "$TMP/ref/ckpt/latest")" = step_00000020.h5 ] \
  && ok "final checkpoint and latest" || bad "final checkpoint"

# 2. kill -9 one rank after the step-10 checkpoint, then resume = auto
kill_one_rank train-baseline killed 10 20 --set training.max_steps=20
cp -r "$TMP/killed/ckpt" "$TMP/ckpt_at_kill"
restart killed
# same_losses A B FIRST LAST: both runs logged exactly steps FIRST..LAST, with bitwise equal losses
# (two empty or truncated logs must not pass as "equal").
same_losses() {
  local a b n=$(($4 - $3 + 1))
  a=$(losses "$1" | awk -v f="$3" -v l="$4" '$1>=f && $1<=l'); b=$(losses "$2" | awk -v f="$3" -v l="$4" '$1>=f && $1<=l')
  [ "$(grep -c . <<<"$a")" = "$n" ] && [ "$(grep -c . <<<"$b")" = "$n" ] && [ "$a" = "$b" ] && return 0
  diff <(echo "$a") <(echo "$b") | head -8; return 1
}
if same_losses ref killed 11 20; then ok "steps 11-20 bitwise equal after kill -9 + resume"; else bad "losses differ after resume"; fi

# 3. resume the step-10 checkpoint at np 1 and np 4
for np in 1 4; do
  mkdir -p "$TMP/np$np/ckpt"; cp "$TMP/ckpt_at_kill/step_00000010.h5" "$TMP/np$np/ckpt/"
  echo step_00000010.h5 > "$TMP/np$np/ckpt/latest"
  if run "np$np" "$np"; then
    if d=$(loss_diff ref "np$np" 11 20 1e-5); then
      ok "resume at np $np: steps 11-20 within 1e-5 (rel diff $d)"
    else bad "resume at np $np: steps $(losses "np$np" | awk '{printf "%s ", $1}')rel diff ${d:-none}"; fi
  else bad "run at np $np"; tail -20 "$TMP/np$np.log"; fi
done

# 4. SIGUSR1 -> checkpoint + exit 75 -> resume finishes. The signal goes to the ranks (mpirun's
# children), not to mpirun: Slurm's --signal signals every task itself, and Open MPI 4.1.6's mpirun
# (the GPU image) does not forward SIGUSR1 while Debian's 4.1.4 does.
# Then SIGTERM through scripts/launch.sh -> 75 too (mpirun itself answers SIGTERM by killing the
# ranks a second later and exiting 1; launch.sh turns it into SIGUSR1 for the ranks).
$MPI -np 2 "$BIN/train-baseline" "${common[@]}" --set training.max_steps=400 --set checkpoint.every=0 \
  --set checkpoint.dir="$TMP/sig/ckpt" --set training.run_dir="$TMP/sig" > "$TMP/sig.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q '"step": *5\b\|"step":5,' "$TMP/sig/metrics.jsonl" 2>/dev/null && break; sleep 0.05; done
pkill -USR1 -P "$pid" || bad "no rank process under mpirun $pid to signal"
wait $pid; rc=$?
if [ "$rc" = 75 ] && [ -f "$TMP/sig/ckpt/$(cat "$TMP/sig/ckpt/latest" 2>/dev/null)" ]; then ok "SIGUSR1 -> exit 75 with a checkpoint"
else bad "SIGUSR1: exit $rc"; tail -5 "$TMP/sig.log"; fi
if $MPI -np 2 "$BIN/train-baseline" "${common[@]}" --set training.max_steps=400 --set checkpoint.every=0 \
     --set training.stop_after_steps=3 --set checkpoint.dir="$TMP/sig/ckpt" --set training.run_dir="$TMP/sig" \
     > "$TMP/sig2.log" 2>&1; [ $? = 75 ] && grep -q "resumed from" "$TMP/sig2.log"; then
  ok "resumed after SIGUSR1 (and stop_after_steps exits 75 again)"; else bad "resume after SIGUSR1"; tail -5 "$TMP/sig2.log"; fi

MPIRUN="$MPI" "$SRC/scripts/launch.sh" -np 2 "$BIN/train-baseline" "${common[@]}" --set training.max_steps=400 \
  --set checkpoint.every=0 --set checkpoint.dir="$TMP/term/ckpt" --set training.run_dir="$TMP/term" > "$TMP/term.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q '"step": *5\b\|"step":5,' "$TMP/term/metrics.jsonl" 2>/dev/null && break; sleep 0.05; done
kill -TERM $pid
wait $pid; rc=$?
if [ "$rc" = 75 ] && grep -q "stopped by a signal" "$TMP/term.log" && [ -f "$TMP/term/ckpt/$(cat "$TMP/term/ckpt/latest" 2>/dev/null)" ]; then
  ok "SIGTERM to scripts/launch.sh -> exit 75 with a checkpoint"; else bad "SIGTERM via launch.sh: exit $rc"; tail -5 "$TMP/term.log"; fi

# 5. dry run and print-config
"$BIN/train-baseline" "${common[@]}" --dry-run --world-size 4 > "$TMP/dry.txt" 2>&1 && grep -q "per-rank memory estimate" "$TMP/dry.txt" \
  && ok "--dry-run --world-size 4" || { bad "--dry-run"; cat "$TMP/dry.txt"; }
# --print-config shows the file's values with the overrides applied, and reads back to itself.
"$BIN/train-baseline" "${common[@]}" --print-config > "$TMP/printed.toml" 2> "$TMP/printed.err"; rc=$?
"$BIN/train-baseline" -c "$TMP/printed.toml" --print-config > "$TMP/printed2.toml" 2>&1
if [ "$rc" = 0 ] && grep -qx 'max_steps = 20' "$TMP/printed.toml" && grep -qxF "train = '$DATA/train.h5'" "$TMP/printed.toml" \
   && grep -qx 'dim = 64' "$TMP/printed.toml" && grep -qx 'rank = 8' "$TMP/printed.toml" && cmp -s "$TMP/printed.toml" "$TMP/printed2.toml"; then
  ok "--print-config: file + overrides, reads back to itself"; else bad "--print-config (exit $rc)"; head -20 "$TMP/printed.toml" "$TMP/printed.err"; fi

# 6. Full fine-tuning (LoRA off): learns, and a stopped + resumed run equals an uninterrupted one.
full=(--set lora.enabled=false --set optimizer.lr=3e-3)
if run full 2 "${full[@]}"; then ok "full fine-tuning run"; else bad "full fine-tuning run"; tail -5 "$TMP/full.log"; fi
python3 - "$TMP/full/metrics.jsonl" "$TMP/ref/metrics.jsonl" <<'PY' && ok "full fine-tuning trains every weight: loss falls further than LoRA's" || bad "full fine-tuning loss"
import json, sys
def train(p): return [r["train/loss"] for r in map(json.loads, open(p)) if "train/loss" in r]
full, lora = train(sys.argv[1]), train(sys.argv[2])
assert len(full) == 20, len(full)
f_end, l_end = sum(full[-3:]) / 3, sum(lora[-3:]) / 3
print(f"full {full[0]:.4f} -> {f_end:.4f}; LoRA {lora[0]:.4f} -> {l_end:.4f}")
assert full[0] - f_end > 2 * (lora[0] - l_end) > 0
PY
grep -qE "trainable / 0(\.0+M)? frozen params" "$TMP/full.log" && ok "full fine-tuning: nothing frozen" || bad "full fine-tuning froze parameters"
run full_stop 2 "${full[@]}" --set training.stop_after_steps=10; rc=$?
if [ "$rc" = 75 ] && run full_stop 2 "${full[@]}" && grep -q "resumed from" "$TMP/full_stop.log" && same_losses full full_stop 1 20; then
  ok "full fine-tuning: stop at 10 (exit 75) + resume = uninterrupted, bitwise"; else bad "full fine-tuning resume (first exit $rc)"; tail -3 "$TMP/full_stop.log"; fi

# 7. checkpoint.lora_only: adapters-only checkpoints (the base is the seeded init again on resume):
#    smaller files, and the run equals the LoRA reference bitwise across a stop + resume.
lonly=(--set checkpoint.lora_only=true)
run lonly 2 "${lonly[@]}" --set training.stop_after_steps=10; rc=$?
if [ "$rc" = 75 ] && run lonly 2 "${lonly[@]}" && grep -q "resumed from" "$TMP/lonly.log" && same_losses ref lonly 1 20; then
  ok "lora_only: stop at 10 + resume = the LoRA reference, bitwise"; else bad "lora_only resume (first exit $rc)"; tail -3 "$TMP/lonly.log"; fi
model_tensors() { h5ls -r "$1" 2>/dev/null | grep '^/model/' | awk -v want="$2" '($1 ~ /lora_[AB]$/) == (want == "lora")' | wc -l; }
a_lora=$(model_tensors "$TMP/lonly/ckpt/step_00000020.h5" lora); a_base=$(model_tensors "$TMP/lonly/ckpt/step_00000020.h5" base)
b_lora=$(model_tensors "$TMP/ref/ckpt/step_00000020.h5" lora); b_base=$(model_tensors "$TMP/ref/ckpt/step_00000020.h5" base)
if [ "$a_lora" -gt 0 ] && [ "$a_lora" = "$b_lora" ] && [ "$a_base" = 0 ] && [ "$b_base" -gt 0 ]; then
  ok "lora_only checkpoint: the $a_lora adapter tensors, none of the $b_base base tensors"
else bad "lora_only checkpoint: $a_lora adapter + $a_base base tensors (full: $b_lora + $b_base)"; fi

e2e_finish
