#!/usr/bin/env bash
# GNU `timeout` around scripts/launch.sh (np 2, train-baseline on the tiny model, more steps than the
# time allows): when the time is up, timeout sends SIGTERM to launch.sh and then to launch.sh's whole
# process group. mpirun must not get it there (Open MPI's mpirun answers SIGTERM by killing the ranks
# and exiting 1): launch.sh runs it in a session of its own and turns the first SIGTERM into the
# SIGUSR1 the ranks act on (the second copy, from the group signal, is the same request). Then:
#  1. `timeout 60 scripts/launch.sh ...`: the ranks finish their step, write a checkpoint (it
#     verifies, `latest` names it) and exit 75; launch.sh says so and exits 75; timeout itself exits
#     124, its own rule for "the time ran out" (coreutils).
#  2. `timeout --preserve-status 60 scripts/launch.sh ...`: the same, and timeout exits 75.
# The two cases run side by side (separate run and checkpoint directories, their own process
# groups): each spends its time waiting for its deadline, so together they take the time of one.
# A second `timeout` (-k) kills the whole test run if it hangs.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_setup launch_timeout
SECS=${WMTP_TEST_TIMEOUT_S:-60}  # the start-up takes 5-30 s on a loaded machine; the steps fill the rest
common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid=""
        --set training.max_steps=100000 --set checkpoint.every=0 --set logging.log_interval=10 --set logging.peak_tflops=1.0)

# start_case NAME [timeout options...]: the case in the background; its pid in pids[NAME].
declare -A pids
start_case() {
  local name=$1; shift
  MPIRUN="$MPI" timeout -k 60 $((SECS + 120)) timeout "$@" "$SECS" "$SRC/scripts/launch.sh" -np 2 "$BIN/train-baseline" \
    "${common[@]}" --set checkpoint.dir="$TMP/$name/ckpt" --set training.run_dir="$TMP/$name" > "$TMP/$name.log" 2>&1 &
  pids[$name]=$!
}

# check_case NAME WANT_RC WHAT: waits for the case, then checks its exit code, log and checkpoint.
check_case() {
  local name=$1 want=$2 what=$3 rc=0 latest
  wait "${pids[$name]}" || rc=$?
  latest=$(cat "$TMP/$name/ckpt/latest" 2> /dev/null)
  if [ "$rc" = "$want" ] && grep -q "stopped by a signal after step [0-9]*: checkpoint written; exit 75" "$TMP/$name.log" \
     && grep -q "launch.sh: mpirun exited 75" "$TMP/$name.log" && ! grep -q "MPI_ABORT\|error:" "$TMP/$name.log" \
     && [ -n "$latest" ] && "$BIN/convert-checkpoint" verify --input "$TMP/$name/ckpt/$latest" > "$TMP/$name.verify" 2>&1; then
    ok "$name: $what -> exit $rc; the ranks checkpointed ($latest, verified) and exited 75"
  else
    bad "$name: $what -> exit $rc (want $want); latest '$latest'"; grep -v '^step\|"step"' "$TMP/$name.log" | tail -8
  fi
}

start_case plain
start_case preserve --preserve-status
check_case plain 124 "timeout"
check_case preserve 75 "timeout --preserve-status"

e2e_finish
