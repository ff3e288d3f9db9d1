#!/usr/bin/env bash
# scripts/gpu-check.sh — everything a GPU machine must show for wmtp, in ONE command (the GPU machine
# may be bare again after each call). Run in the checkout root with the machine's build kit in the
# git-ignored .gpu/ (docs/gpu.md: .gpu/deps, .gpu/build-on-device.sh, .gpu/env.sh):
#
#   bash scripts/gpu-check.sh                                                     # on the GPU machine
#
# Stages (each logs to $OUT/<stage>.log; one line per check in $OUT/summary.txt; a failed stage
# does not stop the later ones):
#   build    CUDA LibTorch build (.gpu/build-on-device.sh) into build-gpu/
#   ctest    the whole suite, CUDA tests included (NCCL and staged communicators on GPU tensors)
#   device   nvidia-smi, the allocator's view after a GPU run (the model lives on the GPU)
#   parity   tiny config, fp32: GPU losses = CPU losses within 1e-5 relative (np 1, NCCL)
#   staged   np 2 sharing one GPU through [runtime] communicator = "staged" = np 1 within 1e-5
#   resume   kill -9 of one rank after a checkpoint, resume = auto: later losses bitwise equal (GPU)
#   ckpt     the GPU run's checkpoint verifies and resumes on the CPU at np 2 (the bitwise GPU-vs-CPU
#            file comparison is the ctest test_checkpoint_device_cuda)
#   bench    bench-peak-flops on the GPU; the GPU benches of scripts/bench-gpu*.sh when present
# Environment: OUT (default ./gpu-check-out), DEPS (default .gpu/deps), BUDGET_S (default 560: the
# device call's 600 s less a margin; late stages are skipped, and say so, when time runs out).
# `--rehearse` (on a CPU machine with a built checkout): no kit, no build, no ctest; the training
# stages run with [runtime] device = "cpu" through the same plumbing, and GPU-only checks say
# "skip" — to test this script where no GPU is available.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-check-out}
DEPS=${DEPS:-.gpu/deps}
KIT=$(dirname "$DEPS")
BUDGET_S=${BUDGET_S:-560}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
passes=0 fails=0
say() { echo "[gpu-check +${SECONDS}s] $*" | tee -a "$SUMMARY"; }
ok() { say "ok   $*"; passes=$((passes + 1)); }
bad() { say "FAIL $*"; fails=$((fails + 1)); }
left() { echo $((BUDGET_S - SECONDS)); }
# stage NAME LIMIT_S CMD...: runs CMD with its output in $OUT/NAME.log, within LIMIT_S and the budget
stage() {
  local name=$1 limit=$2; shift 2
  local rest; rest=$(left)
  [ "$limit" -gt "$rest" ] && limit=$rest
  if [ "$limit" -lt 10 ]; then bad "$name: skipped, out of time budget"; return 1; fi
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
}

REHEARSE=0; [ "${1:-}" = --rehearse ] && REHEARSE=1
DEV=cuda BUILD=build-gpu
skip() { say "skip $* (rehearsal on the CPU)"; }
gpu_only() { [ "$REHEARSE" = 1 ] && { skip "$1"; return 1; }; return 0; }
MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
BIN=$ROOT/bin
if [ "$REHEARSE" = 1 ]; then
  DEV=cpu BUILD=${BUILD_DIR:-build}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  skip "build and ctest"
else
  # ---- build
  [ -f "$KIT/build-on-device.sh" ] && [ -d "$DEPS" ] || {
    bad "no kit: $KIT/build-on-device.sh and $DEPS must be packed first (docs/gpu.md)"; exit 1; }
  if stage build 300 bash "$KIT/build-on-device.sh" "$DEPS" "$BUILD"; then ok "build against CUDA LibTorch"
  else bad "build (tail of $OUT/build.log below)"; tail -40 "$OUT/build.log"; exit 1; fi
  # shellcheck disable=SC1090
  source "$KIT/env.sh" "$DEPS" || { bad "env.sh"; exit 1; }
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
  { nvidia-smi; echo; "$BIN/train-baseline" --version; python3 -c 'import torch; print("torch", torch.__version__)'; } \
    > "$OUT/env.log" 2>&1
  # ---- the whole suite
  if stage ctest 240 bash -c "cd $BUILD && ctest -j 8 --output-on-failure"; then ok "ctest: $(grep -E 'tests passed' "$OUT/ctest.log")"
  else bad "ctest: $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"; grep -E '\(Failed\)|\(SEGFAULT\)|\(Timeout\)|Not Run' "$OUT/ctest.log" | tee -a "$SUMMARY"; fi
fi

# ---- tiny training runs on the GPU
DATA=$ROOT/$BUILD/data/tiny
[ -f "$DATA/train.h5" ] || stage tinydata 60 bash -c "cd $BUILD && ctest -R test_data_tiny_datasets"
RUNS=$OUT/runs
rm -rf "$RUNS"; mkdir -p "$RUNS"
export RUNS BIN MPIRUN DATA DEV
train() {  # train NAME NP [--set ...]: tiny config, 20 steps, checkpoints every 5, run dir $RUNS/NAME
  local name=$1 np=$2; shift 2
  $MPIRUN -np "$np" "$BIN/train-baseline" -c configs/tiny.toml --set data.train="$DATA/train.h5" \
    --set data.valid="$DATA/valid.h5" --set training.max_steps=20 --set checkpoint.every=5 \
    --set checkpoint.keep_last=0 --set logging.log_interval=1 --set logging.peak_tflops=1.0 \
    --set checkpoint.dir="$RUNS/$name/ckpt" --set training.run_dir="$RUNS/$name" "$@" >> "$RUNS/$name.log" 2>&1
}
losses() {  # losses NAME: "step loss" per step, last record wins
  python3 - "$RUNS/$1/metrics.jsonl" <<'PY'
import json, sys
last = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "train/loss" in r: last[r["step"]] = r["train/loss"]
for s in sorted(last): print(s, repr(last[s]))
PY
}
close() {  # close A B TOL: every step A logged is within TOL relative of B's
  python3 - "$RUNS/$1/metrics.jsonl" "$RUNS/$2/metrics.jsonl" "$3" <<'PY'
import json, sys
def load(p):
    d = {}
    for l in open(p):
        r = json.loads(l)
        if "train/loss" in r: d[r["step"]] = r["train/loss"]
    return d
a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
assert a and set(a) <= set(b), f"steps differ: {sorted(a)} vs {sorted(b)}"
worst = max(abs(a[s] - b[s]) / max(abs(b[s]), 1e-30) for s in a)
print(f"{len(a)} steps, worst relative difference {worst:.3g} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}
resume_check() {  # resume_check NAME NP [--set ...]: kill -9 one rank after step 10's checkpoint, resume
  local name=$1 np=$2; shift 2
  train "$name-ref" "$np" "$@" || return 1
  (train "$name" "$np" "$@") &
  local runner=$!
  for _ in $(seq 1 1200); do [ -f "$RUNS/$name/ckpt/step_00000010.h5" ] && break; sleep 0.05; done
  local victim; victim=$(pgrep -f "train-baseline.*$RUNS/$name/ckpt" | tail -1)
  [ -n "$victim" ] && kill -9 "$victim"
  wait "$runner"
  train "$name" "$np" "$@" || return 1
  grep -q "resumed from" "$RUNS/$name.log" || { echo "$name did not resume"; return 1; }
  diff <(losses "$name-ref" | awk '$1>10') <(losses "$name" | awk '$1>10') && echo "$name: steps 11-20 bitwise equal"
}
export -f train losses close resume_check

if stage parity 120 bash -c 'train cpu1 1 --set runtime.device=cpu && train gpu1 1 --set runtime.device=$DEV'; then
  if grep -q "device $DEV" "$RUNS/gpu1.log"; then ok "tiny run on the $DEV: $(grep -m1 "runtime: device" "$RUNS/gpu1.log")"
  else bad "the GPU run did not report a $DEV device (see $RUNS/gpu1.log)"; fi
  if gpu_only "allocator check"; then
    if python3 - "$RUNS/gpu1/metrics.jsonl" >> "$OUT/device.log" 2>&1 <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in rows if "system/gpu_mem_peak_allocated_gib" in x]
assert r, "no system/gpu_mem_* keys in metrics.jsonl"
peak = max(x["system/gpu_mem_peak_allocated_gib"] for x in r)
res = max(x["system/gpu_mem_peak_reserved_gib"] for x in r)
assert peak > 0, "peak allocated is 0: nothing lived on the GPU"
print(f"GPU peak allocated {peak * 1024:.1f} MiB, reserved {res * 1024:.1f} MiB (max over ranks)")
PY
    then ok "allocator: $(tail -1 "$OUT/device.log")"; else bad "allocator figures missing or zero (see $OUT/device.log)"; fi
  fi
  close gpu1 cpu1 1e-5 >> "$OUT/parity.log" 2>&1 && ok "fp32 losses GPU = CPU within 1e-5: $(tail -1 "$OUT/parity.log")" \
    || bad "fp32 losses GPU vs CPU: $(tail -1 "$OUT/parity.log")"
else bad "parity runs (see $RUNS/cpu1.log, $RUNS/gpu1.log)"; tail -5 "$RUNS/gpu1.log" | tee -a "$SUMMARY"; fi

if stage staged 120 bash -c 'train staged2 2 --set runtime.device=$DEV --set runtime.communicator=staged'; then
  close staged2 gpu1 1e-5 >> "$OUT/staged.log" 2>&1 && ok "np 2 on one GPU (staged) = np 1 within 1e-5: $(tail -1 "$OUT/staged.log")" \
    || bad "np 2 staged vs np 1: $(tail -1 "$OUT/staged.log")"
else bad "np 2 staged run (see $RUNS/staged2.log)"; tail -5 "$RUNS/staged2.log" | tee -a "$SUMMARY"; fi

# kill -9 + resume at the same world size: np 1 with NCCL (the one-GPU case), np 2 staged
if stage resume 150 bash -c 'resume_check kill1 1 --set runtime.device=$DEV && resume_check kill2 2 --set runtime.device=$DEV --set runtime.communicator=staged'; then
  ok "kill -9 + resume on the GPU: steps 11-20 bitwise equal (np 1 NCCL, np 2 staged)"
else bad "kill -9 + resume on the GPU (see $OUT/resume.log)"; tail -5 "$OUT/resume.log" | tee -a "$SUMMARY"; fi

# checkpoints written from GPU shards: the bitwise comparison with a CPU-written file of the same
# values is the ctest test_checkpoint_device_cuda (above); here the GPU run's final checkpoint
# verifies (checksums, finite values, shapes) and its step-10 checkpoint resumes on the CPU at np 2.
if stage ckpt 90 bash -c '"$BIN/convert-checkpoint" verify "$RUNS/gpu1/ckpt/step_00000020.h5" &&
    mkdir -p "$RUNS/cpu_from_gpu/ckpt" && cp "$RUNS/gpu1/ckpt/step_00000010.h5" "$RUNS/cpu_from_gpu/ckpt/" &&
    train cpu_from_gpu 2 --set runtime.device=cpu && grep -q "resumed from" "$RUNS/cpu_from_gpu.log"'; then
  close cpu_from_gpu gpu1 1e-5 >> "$OUT/ckpt.log" 2>&1 \
    && ok "GPU checkpoint verifies; resumed on the CPU at np 2: steps 11-20 within 1e-5 of the GPU run" \
    || bad "CPU resume of a GPU checkpoint differs: $(tail -1 "$OUT/ckpt.log")"
else bad "GPU checkpoint verify / CPU resume (see $OUT/ckpt.log, $RUNS/cpu_from_gpu.log)"; fi

# ---- benches
if [ -x $BUILD/bench/bench-peak-flops ] || cmake --build $BUILD --target bench-peak-flops > "$OUT/bench-build.log" 2>&1; then
  stage bench_peak 60 $BUILD/bench/bench-peak-flops --device $DEV --dtype "$([ $DEV = cuda ] && echo bf16 || echo fp32)" --rounds 2 \
    && ok "bench-peak-flops: $(tail -1 "$OUT/bench_peak.log")" || bad "bench-peak-flops (see $OUT/bench_peak.log)"
fi
for b in scripts/bench-gpu*.sh; do
  [ -f "$b" ] || continue
  gpu_only "$b" || continue
  n=$(basename "$b" .sh)
  stage "$n" "$(left)" bash "$b" && ok "$n (see $OUT/$n.log)" || bad "$n (see $OUT/$n.log)"
done

say "$passes passed, $fails failed (logs in $OUT)"
echo "$passes passed, $fails failed"
[ "$fails" = 0 ]
