#!/usr/bin/env bash
# [logging] profile_steps never ends or silently loses a run (np 2, every run under a timeout):
#  1. the trace's path is a directory: one warning naming the steps, training goes on to "done:" with
#     exit 0, no MPI_ABORT, no temporary or partial file;
#  2. run_dir on a full disk (a 256 KB tmpfs, mounted here: needs root, fails without it): the same,
#     and no partial trace on the tmpfs;
#  3. a window after max_steps: said at start ("no trace will be written"), and no trace;
#  4. a window cut by max_steps: said at start, and the trace of the steps it had is written and named;
#  5. a window cut by a stop (training.stop_after_steps, exit 75): the trace is written and named;
#  6. resuming that run with a window: the earlier trace is kept, unchanged, and the new one goes to
#     trace_rank0_step<N>.json, said at start.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_setup profiler_failures
LIMIT=${WMTP_TEST_RUN_LIMIT_S:-300}
mnt=$TMP/mnt
cleanup() { umount "$mnt" 2> /dev/null; }
trap cleanup EXIT
common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="" --set training.max_steps=6
        --set checkpoint.every=0 --set logging.log_interval=1 --set logging.peak_tflops=1.0)
# run_in NAME RUN_DIR [args...]: e2e_lib.sh's run at np 2 with its run directory at RUN_DIR; sets $rc and $log.
E2E_RUN_LIMIT=$LIMIT; PROGRAM=train-baseline
run_in() {
  local name=$1 dir=$2; shift 2
  log=$TMP/$name.log
  run "$name" 2 --set training.run_dir="$dir" "$@"
  rc=$?
}
# went_on NAME: exit 0 after "done:", one "not written" warning, no error or MPI_ABORT.
went_on() {
  local n; n=$(grep -c "profiler trace of steps 2-3 not written" "$log")
  if [ "$rc" = 0 ] && [ "$n" = 1 ] && grep -q "^.*done: 6 steps" "$log" && ! grep -q "^train-baseline: .*error:\|MPI_ABORT" "$log"; then
    ok "$1: exit 0 after 6 steps, one warning: $(grep -o 'profiler trace of steps 2-3 not written.*' "$log" | cut -c1-140)"
  else bad "$1: exit $rc, $n warning(s)"; grep -E "^train-baseline: .*error:|ABORT|profiler|done:" "$log" | head -5; fi
}

# 1. The trace's path is a directory.
mkdir -p "$TMP/dir/trace_rank0.json"
run_in dir "$TMP/dir" --set logging.profile_steps=2 --set logging.profile_warmup=1
went_on "trace path a directory"
left=$(ls -A "$TMP/dir" | grep -v '^trace_rank0.json$\|^metrics.jsonl$\|^config.toml$\|^lock$\|^ckpt$\|^tensorboard$')
[ -z "$left" ] && [ -z "$(ls -A "$TMP/dir/trace_rank0.json")" ] && ok "no partial trace beside it" || bad "left: $left"

# 2. A full disk.
mkdir -p "$mnt"
if mount -t tmpfs -o size=256k tmpfs "$mnt"; then
  run_in full "$mnt/run" --set logging.profile_steps=2 --set logging.profile_warmup=1
  went_on "full disk"
  grep -q "profiler trace of steps 2-3 not written.*\(No space\|incomplete\|cannot write\)" "$log" \
    && ok "the warning says why" || bad "the warning does not say the disk is full"
  left=$(ls -A "$mnt/run" | grep -v '^metrics.jsonl$\|^config.toml$\|^lock$\|^tensorboard$')
  [ -z "$left" ] && ok "no partial trace on the full disk" || bad "left on the tmpfs: $left"
  cleanup
else bad "cannot mount a 256 KB tmpfs on $mnt (this test needs root)"; fi

# 3. A window after max_steps.
run_in after "$TMP/after" --set logging.profile_steps=2 --set logging.profile_warmup=8
if [ "$rc" = 0 ] && grep -q "profile_steps window (steps 9-10) starts after this run's last step 6: no trace will be written" "$log" \
   && ! ls "$TMP/after"/trace* > /dev/null 2>&1; then ok "window after max_steps: $(grep -o 'profile_steps window.*' "$log")"
else bad "window after max_steps (exit $rc)"; grep profil "$log"; fi

# 4. A window cut by max_steps.
run_in cut "$TMP/cut" --set logging.profile_steps=4 --set logging.profile_warmup=4
if [ "$rc" = 0 ] && grep -q "window (steps 5-8) is cut by this run's last step 6: the trace will hold steps 5-6" "$log" \
   && grep -q "profiler trace of steps 5-6 (the window cut short by the last step): $TMP/cut/trace_rank0.json" "$log" \
   && python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$TMP/cut/trace_rank0.json"; then
  ok "window cut by max_steps: $(grep -o 'profiler trace of steps 5-6.*' "$log")"
else bad "window cut by max_steps (exit $rc)"; grep profil "$log"; fi

# 5. A window cut by a stop; 6. its resume keeps the trace.
run_in stop "$TMP/stop" --set logging.profile_steps=3 --set logging.profile_warmup=1 --set training.stop_after_steps=3
if [ "$rc" = 75 ] && grep -q "profiler trace of steps 2-3 (the window cut short by the stop): $TMP/stop/trace_rank0.json" "$log" \
   && [ -s "$TMP/stop/trace_rank0.json" ]; then ok "window cut by a stop: $(grep -o 'profiler trace of steps 2-3.*' "$log")"
else bad "window cut by a stop (exit $rc)"; grep -E "profil|error" "$log"; fi
before=$(md5sum < "$TMP/stop/trace_rank0.json")
run_in stop "$TMP/stop" --set logging.profile_steps=1 --set logging.profile_warmup=0
if [ "$rc" = 0 ] && grep -q "an earlier trace is kept ($TMP/stop/trace_rank0.json): this run's goes to $TMP/stop/trace_rank0_step4.json" "$log" \
   && [ "$(md5sum < "$TMP/stop/trace_rank0.json")" = "$before" ] && [ -s "$TMP/stop/trace_rank0_step4.json" ]; then
  ok "resumed: the earlier trace is unchanged, the new one is trace_rank0_step4.json"
else bad "resumed run and the earlier trace (exit $rc)"; grep -E "profil|error|resumed" "$log"; fi

e2e_finish
