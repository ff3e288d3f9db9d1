#!/usr/bin/env bash
# GPU bench of train-baseline's step beside plain PyTorch (bench/README.md), for scripts/gpu-check.sh:
# bench-small, then the 1B MTP config, each with the peer in eager, torch.compile and FSDP2 modes.
# Run in the checkout root after the GPU build, with `source .gpu/env.sh .gpu/deps` done.
# Environment: BUILD (default build-gpu), STEPS (default 6), MODES (default eager,compile,fsdp2).
set -euo pipefail
BUILD=${BUILD:-build-gpu}
STEPS=${STEPS:-6}
MODES=${MODES:-eager,compile,fsdp2}
cmake --build "$BUILD" -j "$(nproc)" --target bench-train-throughput
for model in small 1b; do
  echo "== $model"
  "$BUILD/bench/bench-train-throughput" --device cuda --model "$model" --steps "$STEPS" --peer-modes "$MODES"
done
