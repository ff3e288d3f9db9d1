#!/usr/bin/env bash
# train-baseline refuses what cannot work, agreed by every rank (np 2): one message, the documented
# exit code, no MPI_Abort, nothing half-written.
#  1. missing dataset (exit 2); a token id beyond the vocabulary met mid-run on some rank (exit 2);
#     validation data from a bigger or another tokenizer (exit 2, both files named); validation data
#     without a correct/incorrect pair (exit 2 naming data.valid, its file and the reason)
#  2. every label cut away by data.max_length (exit 2 at start-up, not "loss 0.0000" to the end)
#  3. run_dir below a file (exit 2); a start-up failure leaves no metrics.jsonl, and no run_dir,
#     checkpoint dir or lock it created
#  4. non-finite numbers: an update that overflows the weights is never checkpointed; a non-finite
#     gradient norm is refused before the optimizer applies it, the last checkpoint stays intact
#  5. locks: a directory where <checkpoint.dir>/lock goes (exit 2 naming it); a second run sharing a
#     running one's run_dir with another checkpoint.dir (exit 2 naming the holder; the first one, held
#     in its start-up by WMTP_TEST_HOLD_STARTUP, then stops on SIGUSR1 with 75)
# Every run is killed after $LIMIT s: a rank left waiting for another fails the test, not ctest's limit.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_setup train_errors
LIMIT=${WMTP_TEST_RUN_LIMIT_S:-300}
MODEL=${WMTP_TINY_TOKENIZER:?set by ctest}
common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5"
        --set training.max_steps=6 --set checkpoint.every=0 --set logging.log_interval=1 --set logging.peak_tflops=1.0)
# expect NAME RC PATTERN [args...]: np 2 run under $TMP/NAME exits RC with exactly one error line matching
# PATTERN (grep -E) and no MPI_Abort.
expect() {
  local name=$1 want=$2 pattern=$3; shift 3
  timeout -k 5 "$LIMIT" $MPI -np 2 "$BIN/train-baseline" "${common[@]}" --set checkpoint.dir="$TMP/$name/ckpt" \
    --set training.run_dir="$TMP/$name" "$@" > "$TMP/$name.log" 2>&1
  local rc=$? n
  n=$(grep -c "error:" "$TMP/$name.log")
  if [ "$rc" = "$want" ] && [ "$n" = 1 ] && grep -qE -- "$pattern" "$TMP/$name.log" && ! grep -q "MPI_ABORT" "$TMP/$name.log"; then
    ok "$name: exit $rc, one message"
  else
    bad "$name: exit $rc (want $want), $n error line(s), want /$pattern/"; grep -E "error:|ABORT" "$TMP/$name.log" | head -5
  fi
}

# 1. Data.
expect missing 2 "none.h5.*not an HDF5 file" --set data.train="$TMP/none.h5"
# Overwrite part of /tokens (contiguous int32) with 0xFF bytes: ids -1, met by whichever rank reads them.
cp "$DATA/train.h5" "$TMP/corrupt.h5"
off=$(h5dump -p -H -d /tokens "$TMP/corrupt.h5" | awk '/OFFSET/ {print $2}')
size=$(h5dump -p -H -d /tokens "$TMP/corrupt.h5" | awk '/SIZE/ {print $2; exit}')
if [ -n "$off" ] && [ -n "$size" ]; then
  head -c $((size / 2)) /dev/zero | tr '\0' '\377' | dd of="$TMP/corrupt.h5" bs=1 seek=$((off + size / 4)) conv=notrunc status=none
  expect corrupt 2 "corrupt.h5: sample [0-9]+ holds token id -1, outside the dataset's vocabulary of 512" \
    --set data.train="$TMP/corrupt.h5" --set data.valid=""
else bad "cannot locate /tokens in $TMP/corrupt.h5"; fi
# Validation sets made with other tokenizers: a bigger vocabulary, and the same size but other pieces.
spm() {  # spm PREFIX VOCAB
  spm_train --input="$SRC/data/tiny/tokenizer.txt" --model_prefix="$1" --model_type=bpe --vocab_size="$2" \
    --character_coverage=1.0 --byte_fallback=true --normalization_rule_name=identity --remove_extra_whitespaces=false \
    --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --num_threads=1 --minloglevel=2 "${@:3}" >/dev/null 2>&1
}
spm "$TMP/big" 700 && spm "$TMP/other" 512 --split_digits=false || bad "spm_train failed"
for t in big other; do
  $MPI -np 1 "$BIN/preprocess-metadata" --input "$SRC/data/tiny/valid.jsonl" --tokenizer "$TMP/$t.model" \
    --output "$TMP/valid_$t.h5" > "$TMP/pre_$t.log" 2>&1 || bad "preprocess with $t.model"
done
expect valid_big 2 "valid_big.h5 was tokenized with 700 ids, more than the model's vocabulary of 512" \
  --set data.valid="$TMP/valid_big.h5"
expect valid_other 2 "valid_other.h5 was tokenized with another tokenizer.*other.model.*train.h5" \
  --set data.valid="$TMP/valid_other.h5"
# Validation data with no problem holding both a correct and an incorrect solution: refused naming
# data.valid, its file and the reason (not "[data] n_samples = 1" of a config that sets 0).
grep '"is_correct": true' "$SRC/data/tiny/valid.jsonl" > "$TMP/valid_correct.jsonl"
$MPI -np 1 "$BIN/preprocess-metadata" --input "$TMP/valid_correct.jsonl" --tokenizer "$MODEL" \
  --output "$TMP/valid_nopair.h5" > "$TMP/pre_nopair.log" 2>&1 || bad "preprocess of the correct-only validation set"
expect valid_nopair 2 "\[data\] valid = '$TMP/valid_nopair.h5' \(val_n_samples = 0: every pair\): no problem has both a correct and an incorrect solution" \
  --set data.valid="$TMP/valid_nopair.h5"
grep -q "n_samples = 1" "$TMP/valid_nopair.log" && bad "valid_nopair: the message names n_samples = 1: $(grep error: "$TMP/valid_nopair.log")"

# 2. Every prompt of the tiny corpus is longer than 16 tokens: nothing left to learn.
expect masked 2 "max_length = 16: each of the [0-9]+ samples selected from .*train.h5 has a prompt at least that long" \
  --set data.max_length=16

# 3. run_dir; a failed start-up leaves no metrics.jsonl behind.
echo file > "$TMP/afile"
expect run_dir 2 "run_dir '$TMP/afile/run': '$TMP/afile' is a file" --set training.run_dir="$TMP/afile/run"
[ ! -e "$TMP/missing/metrics.jsonl" ] && [ ! -e "$TMP/masked/metrics.jsonl" ] && ok "no metrics.jsonl after failed start-ups" \
  || bad "a failed start-up left metrics.jsonl"
# Exit 2 at start-up writes nothing (README's exit table): the run_dir, checkpoint dir and locks a
# failed start made are removed (missing dataset, missing init_weights); a run_dir that existed
# keeps what it held, without the lock this start added.
expect no_weights 2 "none_w\.h5" --set training.init_weights="$TMP/none_w.h5"
mkdir -p "$TMP/kept" && echo notes > "$TMP/kept/notes.txt"
expect kept 2 "none.h5.*not an HDF5 file" --set data.train="$TMP/none.h5"
left="$(ls -d "$TMP/missing" "$TMP/no_weights" "$TMP/masked" 2> /dev/null) $(ls -A "$TMP/kept" | grep -v '^notes.txt$')"
if [ -z "${left// /}" ]; then ok "failed start-ups left no run_dir, checkpoint dir or lock; an existing run_dir kept its file"
else bad "failed start-ups left: $left"; fi

# 4. Non-finite numbers. lr 3e37 with weight decay 11: the decay factor 1 - lr*wd = -3.3e38 and the Adam
#    step lr / (1 - beta1) = 3e38 each fit in fp32 (larger ones are refused as usage errors), but on a
#    norm weight (1.0, trained with LoRA off) their sum does not: step 1's update, from finite loss and
#    gradients, turns weights to -Inf. Its checkpoint is refused, and none exists.
expect inf_weights 1 "after step 1 the parameters or optimizer state hold NaN/Inf: checkpoint not written; no checkpoint was written by this run" \
  --set lora.enabled=false --set optimizer.lr=3e37 --set optimizer.weight_decay=11 --set lr_schedule.type=constant --set checkpoint.every=1 --set data.valid=""
ls "$TMP/inf_weights/ckpt"/step_* > /dev/null 2>&1 && bad "a checkpoint was written with Inf weights" || ok "no checkpoint with Inf weights"
#    lr 1e30: step 1 moves the weights to ~1e30 (finite, checkpointed); step 2's forward overflows, its
#    gradient norm is NaN: refused before the update, and the step-1 checkpoint is named and verifies.
expect nan_grad 1 "gradient norm is -?(nan|inf) at step 2: the step was not applied; the last checkpoint \(.*step_00000001.h5\) is intact" \
  --set optimizer.lr=1e30 --set optimizer.weight_decay=0 --set lr_schedule.type=constant --set checkpoint.every=1 --set data.valid=""
if [ "$(cat "$TMP/nan_grad/ckpt/latest" 2>/dev/null)" = step_00000001.h5 ] && ! ls "$TMP/nan_grad/ckpt"/step_00000002* >/dev/null 2>&1 \
   && "$BIN/convert-checkpoint" verify --input "$TMP/nan_grad/ckpt/step_00000001.h5" > "$TMP/verify.log" 2>&1; then
  ok "the last checkpoint (step 1) is the latest and verifies"; else bad "after the refused step"; tail -3 "$TMP/verify.log"; fi

# 5. Locks. A directory where the checkpoint directory's lock file goes is bad input, not a crash.
mkdir -p "$TMP/lock_dir/ckpt/lock"
expect lock_dir 2 "\[checkpoint\] dir '$TMP/lock_dir/ckpt': its lock file $TMP/lock_dir/ckpt/lock is a directory"
#    Two runs, one run_dir: the first holds its start-up (and the run_dir lock); the second is refused.
WMTP_TEST_HOLD_STARTUP="datasets $LIMIT" $MPI -x WMTP_TEST_HOLD_STARTUP -np 2 "$BIN/train-baseline" "${common[@]}" \
  --set checkpoint.dir="$TMP/shared_a/ckpt" --set training.run_dir="$TMP/shared" > "$TMP/shared_a.log" 2>&1 &
apid=$!
for _ in $(seq 1 $((LIMIT * 10))); do grep -q "start-up held" "$TMP/shared_a.log" && break; sleep 0.1; done
expect shared_b 2 "\[training\] run_dir '$TMP/shared' is in use by another run \(host [^ ]+ pid [0-9]+ since .*lock file $TMP/shared/lock" \
  --set training.run_dir="$TMP/shared"
[ ! -e "$TMP/shared/metrics.jsonl" ] && [ ! -e "$TMP/shared_b/ckpt/lock" ] && ok "the refused run wrote nothing" \
  || bad "the refused run wrote into the shared run_dir or took its checkpoint dir"
pkill -USR1 -P "$apid"
wait "$apid"; rc=$?
[ "$rc" = 75 ] && ok "the first run stops on SIGUSR1 during its start-up (exit 75)" || { bad "first run: exit $rc"; tail -3 "$TMP/shared_a.log"; }

e2e_finish
