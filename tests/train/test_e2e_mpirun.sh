#!/usr/bin/env bash
# e2e_mpirun (e2e_lib.sh), the one place that decides where the end-to-end runs go, with `echo` as the
# launcher: a train-* program started on more ranks than the machine has GPUs, with at least one GPU,
# gets --set runtime.communicator=staged right after the program (so a later explicit --set wins);
# with no GPU or a GPU per rank, or for any other program, the command passes through unchanged.
set -u
lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$lib/../support/checks.sh"
# GPUS NP PROGRAM STAGED(1/0), the expected table written out
cases="0 1 train-baseline 0
0 2 train-baseline 0
0 4 train-critic 0
1 1 train-baseline 0
1 2 train-baseline 1
1 4 train-rho1 1
1 2 preprocess-metadata 0
2 2 train-verifiable 0
2 4 train-baseline 1
8 4 train-baseline 0"
while read -r gpus np prog staged; do
  got=$(WMTP_TEST_GPUS=$gpus MPIEXEC=echo MPIEXEC_FLAGS="--oversubscribe" "$lib/e2e_mpirun.sh" \
          -np "$np" "/b/$prog" -c c.toml --set a=b)
  want="--oversubscribe -np $np /b/$prog -c c.toml --set a=b"
  [ "$staged" = 1 ] && want="--oversubscribe -np $np /b/$prog --set runtime.communicator=staged -c c.toml --set a=b"
  if [ "$got" = "$want" ]; then ok "$gpus GPU(s), np $np, $prog: staged $staged"
  else bad "$gpus GPU(s), np $np, $prog: got '$got', want '$want'"; fi
done <<<"$cases"
[ "$passes" -gt 0 ] || bad "no case ran"
checks_finish
