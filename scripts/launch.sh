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
# a rank that gets it twice within seconds takes it as one request, train/signals.h). A second one is
# passed on to mpirun as SIGTERM (abort now). It exits with mpirun's exit code.
# Under Slurm with srun no wrapper is needed: Slurm signals every rank itself (sbatch/train.sbatch).
set -u
MPIRUN=${MPIRUN:-mpirun}  # may carry options: "mpirun --oversubscribe"
$MPIRUN "$@" &
pid=$!
stops=0
interrupted=0
on_signal() {
  interrupted=1
  stops=$((stops + 1))
  if [ "$stops" = 1 ]; then
    echo "launch.sh: $1: asking every rank to checkpoint and stop (SIGUSR1); $1 again aborts" >&2
    kill -USR1 "$pid" 2>/dev/null
    pkill -USR1 -P "$pid" 2>/dev/null
  else
    kill -TERM "$pid" 2>/dev/null
  fi
}
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGINT' INT
rc=0
while :; do
  interrupted=0
  wait "$pid"
  r=$?
  # A trapped signal interrupts `wait` (status > 128) while mpirun still runs: wait again. 127 after
  # an interruption means the status had already been collected.
  if [ "$interrupted" = 1 ] && [ "$r" = 127 ]; then break; fi
  rc=$r
  [ "$interrupted" = 1 ] || break
done
exit "$rc"
