#!/usr/bin/env bash
# The GPU figures of docs/sharding.md ("Dry run", "7B and 3B on one GPU") in ONE command of at most
# 10 minutes on a GPU machine, build included: bench-train-throughput's 1B run with and without
# activation checkpointing at micro-batch 1 and 4 (the allocator's reserved peak beside --dry-run's
# plan and their ratio), the 3B config (no offload) and the 7B config (offload "optimizer", AdamW on
# the CPU; host peak RSS beside), then the offload and memory tests. Needs the machine's kit in .gpu/
# as scripts/gpu-check.sh does (docs/gpu.md); on the GPU machine, in the checkout root:
#   OUT=<dir> bash bench/gpu_memory_check.sh
# Output in $OUT: mem-1b.txt, mem-3b.txt, mem-7b.txt (bench tables), dry-7b.txt (the 7B plan),
# ctest-memory.txt, build.log. BUILD (default build-gpu) is reused when it already holds the bench.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-memory-out}; build=${BUILD:-build-gpu}; deps=${DEPS:-.gpu/deps}; kit=$(dirname "$deps")
mkdir -p "$out"
# Each stage within its own limit and what is left of the device call's 600 s (BUDGET_S, less a margin).
budget=${BUDGET_S:-570}
within() { local limit=$1 rest=$((budget - SECONDS)); shift; [ "$limit" -gt "$rest" ] && limit=$rest
  if [ "$limit" -lt 20 ]; then echo "skipped (out of time budget): $*"; return 1; fi
  timeout --kill-after=5 "$limit" "$@"; }
bench="$build/bench/bench-train-throughput"
if [ ! -x "$bench" ]; then
  [ -f "$kit/build-on-device.sh" ] && [ -d "$deps" ] || { echo "no kit in $kit (docs/gpu.md)"; exit 1; }
  bash "$kit/build-on-device.sh" "$deps" "$build" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  echo "build: ${SECONDS} s"
fi
# shellcheck disable=SC1090
[ -f "$kit/env.sh" ] && source "$kit/env.sh" "$deps"
for ac in false true; do
  for mb in 1 4; do
    echo "== 1b activation_checkpointing=$ac micro_batch_size=$mb"
    within 100 "$bench" --device cuda --model 1b --steps 3 --python none \
      --set model.activation_checkpointing=$ac --set training.micro_batch_size=$mb 2>&1 | tail -3
  done
done | tee "$out/mem-1b.txt"
within 100 "$bench" --device cuda --model 3b --steps 3 2>&1 | tail -3 | tee "$out/mem-3b.txt"
within 150 "$bench" --device cuda --model 7b --steps 2 2>&1 | tail -3 | tee "$out/mem-7b.txt"
cp bench-train/np1.dry "$out/dry-7b.txt" 2>/dev/null
tail -20 bench-train/np1.log > "$out/train-7b.log" 2>/dev/null
(cd "$build" && within 90 ctest -R 'offload|step_memory|dry_run' --output-on-failure 2>&1 | tail -40) |
  tee "$out/ctest-memory.txt"
