#!/usr/bin/env bash
# The NCCL watchdog ends a stuck job (CUDA builds): nccl_hang_cuda holds its stream for 120 s behind
# an all-reduce with collective_timeout_s = 2. Expect: a non-zero exit well before the stream frees
# itself (not 3, which means no abort; not 124, the 110 s limit), and the watchdog's message naming
# the rank and the collective (the all-reduce after the warm-up one; set-up is collective #1).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../support/checks.sh"
exe=${1:?usage: $0 NCCL_HANG_EXE}
MPI="${MPIEXEC:-mpirun} ${MPIEXEC_FLAGS:-}"
start=$(date +%s)
out=$(timeout 110 $MPI -np 1 "$exe" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
echo "$out" | tail -20
echo "exit $rc after ${took}s"
[ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && [ "$rc" -ne 124 ] && ok "aborted: exit $rc" || bad "expected an abort (exit $rc)"
echo "$out" | grep -qE "NCCL all_reduce \(collective #[0-9]+ of rank 0 .*has not completed" && ok "the watchdog's message names rank 0 and the collective" \
  || bad "no watchdog message naming rank 0 and the collective"
echo "$out" | grep -q "Aborting the job" && ok "abort message" || bad "no abort message"
checks_finish
