#!/usr/bin/env bash
# launch.sh: mpirun for jobs that must be stoppable with SIGTERM (a `timeout`, a scheduler, `kill`).
#   scripts/launch.sh -np 8 bin/train-baseline -c configs/baseline.toml    # same arguments as mpirun
# Why: Open MPI's mpirun treats SIGTERM and SIGINT as "abort the job": it passes SIGTERM to the
# ranks, SIGKILLs them odls_base_sigkill_timeout (1 s by default) later, and exits 1 whatever the
# ranks return — a checkpoint that takes longer is cut short (the previous one stays, as the write
# is atomic) and the caller never sees 75 ("resume me"). mpirun cannot be told to forward SIGTERM
# (ess_base_forward_signals refuses it), but it does forward SIGUSR1, on which every wmtp trainer
# finishes its step, checkpoints and exits 75 — and mpirun then exits 75 too.
# So this script runs mpirun and turns the first SIGTERM or SIGINT into SIGUSR1, sent to mpirun and to
# mpirun's children (the local ranks: Open MPI 4.1.6's mpirun does not forward SIGUSR1, 4.1.4's does;
# a rank that gets it twice within seconds takes it as one request, train/signals.h). Repeats within
# 5 s are the same request (`timeout` signals this script and then its whole process group; Ctrl-C
# reaches every process of the terminal's group) and are ignored; a later one is passed on to mpirun
# as SIGTERM (abort now). It exits with mpirun's exit code.
# mpirun runs in a session of its own (setsid), so signals meant for this script's process group —
# GNU timeout's, a terminal's Ctrl-C — reach mpirun only through this script, as SIGUSR1. Where
# setpriv knows --pdeathsig, mpirun also gets SIGTERM (abort) when this script is killed outright
# (SIGKILL, `timeout -k`), so no job is left running without its launcher.
# With GNU timeout: `timeout 1h scripts/launch.sh ...` ends with a checkpoint and mpirun's 75, but
# timeout itself exits 124 when the time ran out (its own rule); `timeout --preserve-status 1h
# scripts/launch.sh ...` exits with the 75 (docs/training.md).
# A rank that has not yet installed its handler (exec'd a moment ago, still loading its libraries)
# would be killed by SIGUSR1 ("exited on signal 10", exit 138): the first request waits, up to
# $WMTP_LAUNCH_READY_WAIT_S (30) seconds, until every rank catches SIGUSR1 (SigCgt in /proc), then
# sends it. wmtp programs catch it from exec on (train/signals.h), so the wait is short.
# Under Slurm with srun no wrapper is needed: Slurm signals every rank itself (sbatch/train.sbatch).
set -u
MPIRUN=${MPIRUN:-mpirun}  # may carry options: "mpirun --oversubscribe"
command -v setsid > /dev/null || { echo "launch.sh: setsid (util-linux) not found" >&2; exit 2; }
pdeath=()
setpriv --help 2>&1 | grep -q -- --pdeathsig && pdeath=(setpriv --pdeathsig TERM)
# A background job of a non-interactive shell is not a process group leader, so setsid makes the new
# session in this very process and $! is mpirun's pid (-w: should it fork, it still waits).
setsid -w "${pdeath[@]}" $MPIRUN "$@" &
pid=$!
stops=0
first_stop=0
# ranks_ready: mpirun has children and every one of them catches SIGUSR1 (bit 9 of SigCgt).
ranks_ready() {
  local kids k mask
  kids=$(pgrep -P "$pid") || return 1
  for k in $kids; do
    mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$k/status" 2>/dev/null)
    [ -n "$mask" ] || continue  # gone already
    (( (16#$mask >> 9) & 1 )) || return 1
  done
}
wait_for_ranks() {
  local i
  for ((i = 0; i < ${WMTP_LAUNCH_READY_WAIT_S:-30} * 20; i++)); do
    ranks_ready && return 0
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  echo "launch.sh: the ranks do not catch SIGUSR1 after ${WMTP_LAUNCH_READY_WAIT_S:-30} s: sending it anyway" >&2
}
on_signal() {
  if [ "$stops" -gt 0 ] && [ $((SECONDS - first_stop)) -lt 5 ]; then return; fi  # the same request again
  stops=$((stops + 1))
  if [ "$stops" = 1 ]; then
    first_stop=$SECONDS
    echo "launch.sh: $1: asking every rank to checkpoint and stop (SIGUSR1); $1 again (after 5 s) aborts" >&2
    wait_for_ranks
    kill -USR1 "$pid" 2>/dev/null
    pkill -USR1 -P "$pid" 2>/dev/null
  else
    echo "launch.sh: $1 again: aborting (SIGTERM to mpirun)" >&2
    kill -TERM "$pid" 2>/dev/null
  fi
}
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGINT' INT
# Poll for mpirun's end rather than block in `wait`: a trap that interrupts `wait` just as mpirun
# exits can lose mpirun's status in bash (wait then returns -1). The traps run between the sleeps;
# the final `wait` only reads the status bash has recorded.
while kill -0 "$pid" 2>/dev/null; do sleep 1; done
wait "$pid"; rc=$?
[ "$stops" -gt 0 ] && echo "launch.sh: mpirun exited $rc" >&2
exit "$rc"
