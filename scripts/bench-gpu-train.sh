#!/usr/bin/env bash
# GPU bench of train-baseline's step beside plain PyTorch (bench/README.md), in one call: the table of
# docs/gpu.md "Performance" for the 1B MTP config and bench-small — wmtp np 1 and the peer in eager,
# torch.compile and FSDP2 modes (same batches, same AdamW settings, constant lr, 20 timed steps),
# tokens/s, step time, MFU (train/flops.h), peak GPU memory, the ratios — wmtp's step by phase
# (perf/phase_*), and a LibTorch profiler trace of a few wmtp steps. scripts/gpu-check.sh runs it.
#
# Run in the checkout root after the GPU build, with `source .gpu/env.sh .gpu/deps` done:
#   bash scripts/bench-gpu-train.sh
# Writes bench-gpu-train.log; with $BENCH_OUT set (a folder), also copies there the log, each model's wmtp metrics
# (metrics-<model>.jsonl) and trace (trace-<model>.json.gz).
# Environment: BUILD (default build-gpu), STEPS (20), MODES (eager,compile,fsdp2), MODELS ("1b small"),
# PROFILE_STEPS (3; 0 = no trace).
set -euo pipefail
BUILD=${BUILD:-build-gpu}
STEPS=${STEPS:-20}
MODES=${MODES:-eager,compile,fsdp2}
MODELS=${MODELS:-1b small}
PROFILE_STEPS=${PROFILE_STEPS:-3}
LOG=bench-gpu-train.log
cmake --build "$BUILD" -j "$(nproc)" --target bench-train-throughput
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /' | tee "$LOG" || true
for model in $MODELS; do
  echo "== $model" | tee -a "$LOG"
  "$BUILD/bench/bench-train-throughput" --device cuda --model "$model" --steps "$STEPS" --peer-modes "$MODES" \
    --profile-steps "$PROFILE_STEPS" 2>&1 | tee -a "$LOG"
  if [ -n "${BENCH_OUT:-}" ]; then  # bench-train/ is the next model's scratch: keep what this one left
    cp bench-train/np1/metrics.jsonl "$BENCH_OUT/metrics-$model.jsonl" 2>/dev/null || true
    if [ -f bench-train/profile/trace_rank0.json ]; then
      gzip -c bench-train/profile/trace_rank0.json > "$BENCH_OUT/trace-$model.json.gz"
    fi
  fi
done
if [ -n "${BENCH_OUT:-}" ]; then cp "$LOG" "$BENCH_OUT/"; fi
