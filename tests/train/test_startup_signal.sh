#!/usr/bin/env bash
# A stop signal (SIGUSR1, as Slurm sends before the time limit; SIGTERM alike) during start-up ends a
# train-* run at the next start-up phase with exit 75 ("resume me"), one message, and no checkpoint
# written — never exit 138 (killed by the signal, the job not requeued). np 2; the start-up is held at
# one phase by the test-only WMTP_TEST_HOLD_STARTUP="PHASE SECONDS" (a real 7B start-up spends minutes
# in each) and the ranks are signalled once the hold is logged:
#  1. train-baseline after the datasets are opened, and after the policy is built: exit 75, the
#     message names the phase, no checkpoint, no metrics.jsonl.
#  2. train-rho1 after its frozen reference is loaded (reference: a one-head train-baseline model).
#  3. A resumed run signalled after its checkpoint is loaded: exit 75, every file of the checkpoint
#     directory (the checkpoints, `latest`) unchanged; the next start resumes it and finishes (exit 0).
# Every run is killed after $LIMIT s, so a hang fails the test instead of waiting for ctest.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_setup startup_signal
LIMIT=${WMTP_TEST_RUN_LIMIT_S:-120}
common=(--set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5"
        --set training.max_steps=2 --set checkpoint.every=1 --set logging.log_interval=1 --set logging.peak_tflops=1.0)

# start NAME PROGRAM PHASE [args...]: np 2 in the background, held after PHASE; sets $pid (mpirun).
# $config: the config file (tiny.toml unless set).
start() {
  local name=$1 prog=$2 phase=$3; shift 3
  WMTP_TEST_HOLD_STARTUP="$phase $LIMIT" $MPI -x WMTP_TEST_HOLD_STARTUP -np 2 "$BIN/$prog" \
    -c "${config:-$SRC/configs/tiny.toml}" "${common[@]}" \
    --set checkpoint.dir="$TMP/$name/ckpt" --set training.run_dir="$TMP/$name" "$@" > "$TMP/$name.log" 2>&1 &
  pid=$!
}
# finish NAME: waits for $pid (killing it after $LIMIT s); sets $rc (124: killed).
finish() {
  local deadline=$(( $(date +%s) + LIMIT ))
  while kill -0 "$pid" 2> /dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
  if kill -0 "$pid" 2> /dev/null; then kill -KILL "$pid"; wait "$pid" 2> /dev/null; rc=124; return; fi
  wait "$pid"; rc=$?
}
# signal_when_held NAME PHASE: once the hold is logged, SIGUSR1 to every rank (mpirun's children).
signal_when_held() {
  local i
  for i in $(seq 1 $((LIMIT * 10))); do
    if grep -q "start-up held after '$2'" "$TMP/$1.log" 2> /dev/null; then pkill -USR1 -P "$pid"; return 0; fi
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  return 1
}
# held_stop NAME PROGRAM PHASE [args...]: the whole case; checks exit 75 and the one message.
held_stop() {
  local name=$1 prog=$2 phase=$3
  start "$@"
  signal_when_held "$name" "$phase" || bad "$name: the start-up never reached '$phase' ($(tail -2 "$TMP/$name.log"))"
  finish "$name"
  local n
  n=$(grep -c "stopped by a signal during start-up (after '$phase'): no checkpoint written" "$TMP/$name.log")
  if [ "$rc" = 75 ] && [ "$n" = 1 ] && ! grep -q "error:\|MPI_ABORT" "$TMP/$name.log"; then
    ok "$name: signal after '$phase' -> exit 75, one message"
  else bad "$name: exit $rc (want 75), $n stop message(s)"; tail -5 "$TMP/$name.log"; fi
}
# no_checkpoint NAME: nothing in the checkpoint directory but the lock, no metrics.jsonl
no_checkpoint() {
  local files
  files=$(ls -A "$TMP/$1/ckpt" 2> /dev/null | grep -v '^lock$')
  [ -z "$files" ] && [ ! -e "$TMP/$1/metrics.jsonl" ] && ok "$1: no checkpoint, no metrics.jsonl" \
    || bad "$1: left behind: $files $(ls "$TMP/$1")"
}

# 1. train-baseline
held_stop datasets train-baseline datasets; no_checkpoint datasets
held_stop policy train-baseline policy; no_checkpoint policy

# 2. train-rho1: its reference first (one head, full weights, one step)
if $MPI -np 1 "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" "${common[@]}" --set model.n_future_tokens=1 --set model.n_layers=3 \
     --set lora.enabled=false --set training.max_steps=1 --set checkpoint.dir="$TMP/ref/ckpt" \
     --set training.run_dir="$TMP/ref" > "$TMP/ref.log" 2>&1; then ok "one-head reference model"
else bad "one-head reference model"; tail -3 "$TMP/ref.log"; fi
config=$SRC/configs/tiny-rho1.toml held_stop rho1 train-rho1 reference --set rho1.reference="$TMP/ref/ckpt"
no_checkpoint rho1

# 3. A run with checkpoints at steps 1 and 2, resumed towards step 4 and signalled once step 2 is loaded.
if $MPI -np 2 "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" "${common[@]}" --set checkpoint.dir="$TMP/resume/ckpt" \
     --set training.run_dir="$TMP/resume" > "$TMP/first.log" 2>&1; then ok "first run: checkpoints at steps 1, 2"
else bad "first run"; tail -3 "$TMP/first.log"; fi
before=$(cd "$TMP/resume/ckpt" && ls -A | grep -v '^lock$' | xargs md5sum)
held_stop resume train-baseline resume --set training.max_steps=4
after=$(cd "$TMP/resume/ckpt" && ls -A | grep -v '^lock$' | xargs md5sum)
if [ -n "$before" ] && [ "$before" = "$after" ] && grep -q "the one resumed from is untouched: .*step_00000002.h5" "$TMP/resume.log"
then ok "resume: the checkpoint directory is unchanged ($(echo "$after" | wc -l) files), the message names step 2"
else bad "resume: the checkpoint directory changed"; diff <(echo "$before") <(echo "$after"); fi
if timeout -k 5 "$LIMIT" $MPI -np 2 "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" "${common[@]}" --set training.max_steps=4 \
     --set checkpoint.dir="$TMP/resume/ckpt" --set training.run_dir="$TMP/resume" > "$TMP/again.log" 2>&1 \
   && grep -q "resumed from .*step_00000002.h5 at step 2" "$TMP/again.log" && [ "$(cat "$TMP/resume/ckpt/latest")" = step_00000004.h5 ]
then ok "the next start resumes step 2 and finishes step 4"
else bad "the next start"; tail -3 "$TMP/again.log"; fi

e2e_finish
