#!/usr/bin/env bash
# The MPI watchdog ends a job whose last rank stops answering (mpi_hang.cpp), with
# collective_timeout_s = 2: np 2 with the last rank frozen (SIGSTOP) inside the tensor all-reduce,
# np 3 with the last rank alive but asleep while the others are in any_rank (mpi_util.h). Expect
# for each: exit 75 (the watchdog's: train.sbatch requeues) well before our own 60 s limit (124:
# the job hung), and one message naming the collective, its number and the missing rank.
set -u
exe=${1:?usage: $0 MPI_HANG_EXE}
MPI="${MPIEXEC:-mpirun} ${MPIEXEC_FLAGS:-}"
source "$(dirname "${BASH_SOURCE[0]}")/../support/checks.sh"
check() {  # check NP MODE OP PATTERN...: run one case, then grep its output for each pattern
  local np=$1 mode=$2 op=$3 out rc start took; shift 3
  start=$(date +%s)
  out=$(timeout -k 10 60 $MPI -np "$np" "$exe" 2 "$mode" "$op" 2>&1); rc=$?
  took=$(( $(date +%s) - start ))
  echo "--- np $np, last rank $mode, others in $op: exit $rc after ${took}s"; echo "$out" | grep -v "^\s*$" | tail -12
  if [ "$rc" = 75 ]; then ok "np $np: exit 75 after ${took}s"; else bad "np $np: exit $rc, expected 75 (124: hung until the limit; 3: not aborted)"; fi
  local p
  for p in "$@"; do
    if echo "$out" | grep -qE "$p"; then ok "np $np: a line matches $p"; else bad "np $np: no line matching: $p"; fi
  done
}
check 2 stop all_reduce \
  "MPI all_reduce \(collective #[0-9]+ of rank 0 on [^)]*\) has not completed" \
  "did not arrive: rank 1 on [^ ]+ did not answer within" "Aborting the job"
check 3 sleep any_rank \
  "MPI any_rank \(collective #[0-9]+ of rank [01] on [^)]*\) has not completed" \
  "did not arrive: rank 2 on [^ ]+ has not arrived \(its last collective, #[0-9]+ all_reduce, finished\)" \
  "Waiting in it too: rank [01] on"
checks_finish
