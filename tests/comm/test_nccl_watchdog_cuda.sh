#!/usr/bin/env bash
# The NCCL watchdog ends a stuck job (CUDA builds): nccl_hang_cuda holds its stream for 120 s behind
# an all-reduce with collective_timeout_s = 2. Expect: a non-zero exit well before the stream frees
# itself (not 3, which means no abort; not 124, the 110 s limit), and the watchdog's message naming
# the rank and the collective (the all-reduce after the warm-up one; set-up is collective #1).
set -u
exe=${1:?usage: $0 NCCL_HANG_EXE}
MPI="${MPIEXEC:-mpirun} ${MPIEXEC_FLAGS:-}"
start=$(date +%s)
out=$(timeout 110 $MPI -np 1 "$exe" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
echo "$out" | tail -20
echo "exit $rc after ${took}s"
fails=0
[ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && [ "$rc" -ne 124 ] || { echo "FAIL: expected an abort (exit $rc)"; fails=$((fails+1)); }
echo "$out" | grep -qE "NCCL all_reduce \(collective #[0-9]+ of rank 0 .*has not completed" || { echo "FAIL: no watchdog message naming rank 0 and the collective"; fails=$((fails+1)); }
echo "$out" | grep -q "Aborting the job" || { echo "FAIL: no abort message"; fails=$((fails+1)); }
[ "$fails" = 0 ] && echo "1 passed, 0 failed" || { echo "0 passed, $fails failed"; exit 1; }
