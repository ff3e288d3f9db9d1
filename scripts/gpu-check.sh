#!/usr/bin/env bash
# scripts/gpu-check.sh — everything a GPU machine must show for wmtp, in ONE command of at most 10
# minutes, build included (the GPU machine may be bare again after each call). docs/gpu.md gives the
# whole sequence; in short, on the CPU machine in the checkout root (.gpu/ is git-ignored):
#
#   bash $KIT/pack-deps.sh .gpu/deps && cp $KIT/*.sh .gpu/     # KIT: the machine's kit (not in wmtp)
#
# then on the GPU machine, in the checkout root (with .gpu carried along):
#
#   bash scripts/gpu-check.sh
#
# Stages (one line per check in $OUT/summary.txt; a failed stage does not stop the later ones):
#   build    CUDA LibTorch build (.gpu/build-on-device.sh) into build-gpu/
#   ctest    the whole suite but the slurm label (no Slurm there), CUDA tests included; it runs in the
#            background while the training stages below run (they check numbers, not speed)
#   device   nvidia-smi; the allocator's view after a GPU run (the model lives on the GPU)
#   parity   tiny config, fp32, 20 steps at lr 1e-2, np 1: GPU (NCCL) against CPU (MPI)
#   staged   np 2 sharing one GPU through [runtime] communicator = "staged", against np 1
#   resume   kill -9 of one rank after a checkpoint, resume = auto: later losses bitwise equal (GPU)
#   ckpt     the GPU run's checkpoint verifies and resumes on the CPU at np 2
#   binding  which library the std::filesystem symbols of a test binary bind to, at run time
#   decode   bench-generate-throughput on random weights of the 1B shape, bf16: plain vs self-speculative
#            (K = 2, 4) at batch 1 and 8, tokens/s and one speculative forward's cost in plain forwards
#            (random heads rarely draft a right token: the cost is the figure; the rehearsal runs the
#            small shape on the CPU)
#   decode-model  the same bench on the trained bench model (bench/train-generate-model.sh: carry
#            runs/bench-generate/model.h5 and build/tiny/tokenizer.model), fp32, K = 4, batch 1 and 8 on the
#            held-out tasks: tokens per forward where the heads draft, and the speed-up over plain
#   bench    scripts/bench-gpu-train.sh (the 1B bench beside plain PyTorch), then bench-peak-flops
# The parity-type checks (parity, staged, ckpt) compare two runs of the same maths whose sums are
# taken in another order: the first step compared (same weights, same batch) within 1e-6 relative in
# loss and gradient norm, the later steps' losses within 1e-4 relative (docs/gpu.md, "fp32 parity").
#
# Output: $OUT/summary.txt, $OUT/logs.tar.gz (every stage's log and the runs' logs and metrics), and
# $OUT/ctest.log and $OUT/bench.log when those stages ran: at most four files.
# Environment: OUT (default ./gpu-check-out), WORK (scratch, default ./gpu-check-work), DEPS (default
# .gpu/deps), BUDGET_S (default 570: the device call's 600 s less a margin; late stages are skipped,
# and say so, when time runs out), CTEST_JOBS (8), DEC_MODEL (runs/bench-generate/model.h5), DEC_TOKENIZER
# (build/tiny/tokenizer.model).
# `--rehearse` (on a CPU machine, in a built checkout): the same flow with [runtime] device = "cpu";
# no kit and no build (build/ is used), ctest runs a few quick tests to prove the stage's plumbing,
# GPU-only checks print "skip", and stages get 4x their time limits (SCALE_REHEARSE; BUDGET_S 2400).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-check-out}
WORK=${WORK:-$ROOT/gpu-check-work}
DEPS=${DEPS:-.gpu/deps}
KIT=$(dirname "$DEPS")
CTEST_JOBS=${CTEST_JOBS:-8}
DEC_MODEL=${DEC_MODEL:-runs/bench-generate/model.h5} DEC_TOKENIZER=${DEC_TOKENIZER:-build/tiny/tokenizer.model}
REHEARSE=0; [ "${1:-}" = --rehearse ] && REHEARSE=1
# The CPU trains the tiny runs 10-50x slower than a GPU (more on a shared 2-core machine): the
# rehearsal gives every stage SCALE times its GPU limit, within a budget of its own.
SCALE=1; [ "$REHEARSE" = 1 ] && SCALE=${SCALE_REHEARSE:-4}
BUDGET_S=${BUDGET_S:-$([ "$REHEARSE" = 1 ] && echo 2400 || echo 570)}
mkdir -p "$OUT" && rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
rm -f "$OUT"/summary.txt "$OUT"/logs.tar.gz "$OUT"/ctest.log "$OUT"/bench.log
SUMMARY=$OUT/summary.txt
# ok / bad / checks_finish / rel_diff: the tests' shell library (this script runs from a checkout);
# its verdict lines go through say: time-stamped, and into the summary
source "$ROOT/tests/support/checks.sh"
say() { echo "[gpu-check +${SECONDS}s] $*" | tee -a "$SUMMARY"; }
checks_say() { say "$*"; }
skip() { say "skip $*"; }
left() { echo $((BUDGET_S - SECONDS)); }
# stage NAME LIMIT_S CMD...: runs CMD with its output in $WORK/NAME.log, within LIMIT_S and the budget
stage() {
  local name=$1 limit=$(($2 * SCALE)); shift 2
  local rest; rest=$(left)
  [ "$limit" -gt "$rest" ] && limit=$rest
  if [ "$limit" -lt 10 ]; then bad "$name: not run, out of time budget"; return 1; fi
  timeout --kill-after=5 "$limit" "$@" > "$WORK/$name.log" 2>&1
}
gpu_only() { [ "$REHEARSE" = 1 ] && { skip "$1 (GPU only; this is the rehearsal on the CPU)"; return 1; }; return 0; }
finish() {
  say "$passes passed, $fails failed (logs in $OUT/logs.tar.gz)"
  tar czf "$OUT/logs.tar.gz" -C "$WORK" . 2>/dev/null || echo "gpu-check: could not tar $WORK" >&2
  checks_finish
}

MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
BIN=$ROOT/bin
if [ "$REHEARSE" = 1 ]; then
  DEV=cpu BUILD=${BUILD_DIR:-build}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  CTEST_ARGS=(-R "^(test_stdlib_first|test_link_order|test_watchdog|test_runtime_np1)$")
  skip "build against CUDA LibTorch (GPU only; the rehearsal uses $BUILD/)"
  [ -x "$BIN/train-baseline" ] || { bad "no $BIN/train-baseline: build the checkout first"; finish; exit 1; }
else
  DEV=cuda BUILD=build-gpu
  CTEST_ARGS=(-LE slurm)
  [ -f "$KIT/build-on-device.sh" ] && [ -d "$DEPS" ] || {
    bad "no kit: $KIT/build-on-device.sh and $DEPS must be packed first (docs/gpu.md)"; finish; exit 1; }
  if stage build 300 bash "$KIT/build-on-device.sh" "$DEPS" "$BUILD"; then ok "build against CUDA LibTorch"
  else bad "build (tail of build.log below)"; tail -40 "$WORK/build.log"; finish; exit 1; fi
  # shellcheck disable=SC1090
  source "$KIT/env.sh" "$DEPS" || { bad "env.sh"; finish; exit 1; }
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
  { nvidia-smi; echo; "$BIN/train-baseline" --version; python3 -c 'import torch; print("torch", torch.__version__)'; } \
    > "$WORK/env.log" 2>&1
fi

# The tiny datasets first (the suite's fixture makes them), copied: the suite remakes its own meanwhile.
(cd "$BUILD" && ctest -R '^test_data_tiny_datasets$' > "$WORK/tinydata.log" 2>&1) || bad "tiny datasets (tinydata.log)"
DATA=$WORK/data
mkdir -p "$DATA" && cp "$ROOT/$BUILD"/data/tiny/{train,valid}.h5 "$DATA/"
# ---- the suite, in the background while the training stages below run
ctest_limit=$(( $(left) - 170 )); [ "$ctest_limit" -gt 420 ] && ctest_limit=420
(cd "$BUILD" && timeout --kill-after=10 "$ctest_limit" ctest -j "$CTEST_JOBS" --output-on-failure "${CTEST_ARGS[@]}") \
  > "$WORK/ctest.log" 2>&1 &
ctest_pid=$!

# ---- tiny training runs on the GPU
RUNS=$WORK/runs
mkdir -p "$RUNS"
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
# same_maths A B: run A against run B, the same maths summed in another order (GPU vs CPU, np 2 vs 1,
# a CPU resume of a GPU checkpoint). The first step A logged starts from the same weights as B's step:
# its loss and gradient norm within 1e-6 relative; every later loss within 1e-4 relative (rel_diff).
same_maths() {
  local rows s0 la lb ga gb l0 g0 s d per="" worst=0 at=none pass=1
  # "step lossA lossB gradA gradB" for every step A logged (the last record of a step wins)
  rows=$(python3 - "$RUNS/$1/metrics.jsonl" "$RUNS/$2/metrics.jsonl" <<'PY'
import json, sys
def load(p):
    d = {}
    for l in open(p):
        r = json.loads(l)
        if "train/loss" in r: d[r["step"]] = r
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a and set(a) <= set(b), f"steps differ: {sorted(a)} vs {sorted(b)}"
for s in sorted(a):
    print(s, repr(a[s]["train/loss"]), repr(b[s]["train/loss"]), repr(a[s]["train/grad_norm"]), repr(b[s]["train/grad_norm"]))
PY
  ) || return 1
  read -r s0 la lb ga gb <<<"$rows"
  l0=$(rel_diff "$la" "$lb" 1e-6) || pass=0
  g0=$(rel_diff "$ga" "$gb" 1e-6) || pass=0
  while read -r s la lb _; do
    d=$(rel_diff "$la" "$lb") || return 1
    per+=" $d"
    if [ "$s" != "$s0" ]; then
      rel_diff "$la" "$lb" 1e-4 > /dev/null || pass=0
      rel_diff "$la" "$lb" "$worst" > /dev/null || { worst=$d; at=$s; }
    fi
  done <<<"$rows"
  echo "per step:$per"
  echo "step $s0: loss $l0, grad norm $g0 (<= 1e-6); later steps: worst loss $worst at step $at (<= 1e-4)"
  [ "$pass" = 1 ]
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
export -f train losses same_maths resume_check rel_diff

if stage parity 150 bash -c 'train cpu1 1 --set runtime.device=cpu && train gpu1 1 --set runtime.device=$DEV'; then
  if grep -q "device $DEV" "$RUNS/gpu1.log"; then ok "tiny run on the $DEV: $(grep -m1 "runtime: device" "$RUNS/gpu1.log")"
  else bad "the GPU run did not report a $DEV device (see runs/gpu1.log)"; fi
  if gpu_only "allocator check"; then
    if python3 - "$RUNS/gpu1/metrics.jsonl" >> "$WORK/device.log" 2>&1 <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r = [x for x in rows if "system/gpu_mem_peak_allocated_gib" in x]
assert r, "no system/gpu_mem_* keys in metrics.jsonl"
peak = max(x["system/gpu_mem_peak_allocated_gib"] for x in r)
res = max(x["system/gpu_mem_peak_reserved_gib"] for x in r)
assert peak > 0, "peak allocated is 0: nothing lived on the GPU"
print(f"GPU peak allocated {peak * 1024:.1f} MiB, reserved {res * 1024:.1f} MiB (max over ranks)")
PY
    then ok "allocator: $(tail -1 "$WORK/device.log")"; else bad "allocator figures missing or zero (see device.log)"; fi
  fi
  same_maths gpu1 cpu1 >> "$WORK/parity.log" 2>&1 && ok "fp32 $DEV vs cpu, 20 steps: $(tail -1 "$WORK/parity.log")" \
    || bad "fp32 $DEV vs cpu: $(tail -1 "$WORK/parity.log")"
else bad "parity runs (see runs/cpu1.log, runs/gpu1.log)"; tail -5 "$RUNS/gpu1.log" | tee -a "$SUMMARY"; fi

if stage staged 120 bash -c 'train staged2 2 --set runtime.device=$DEV --set runtime.communicator=staged'; then
  same_maths staged2 gpu1 >> "$WORK/staged.log" 2>&1 && ok "np 2 on one $DEV (staged) vs np 1: $(tail -1 "$WORK/staged.log")" \
    || bad "np 2 staged vs np 1: $(tail -1 "$WORK/staged.log")"
else bad "np 2 staged run (see runs/staged2.log)"; tail -5 "$RUNS/staged2.log" | tee -a "$SUMMARY"; fi

# kill -9 + resume at the same world size: np 1 with NCCL (the one-GPU case), np 2 staged
if stage resume 150 bash -c 'resume_check kill1 1 --set runtime.device=$DEV && resume_check kill2 2 --set runtime.device=$DEV --set runtime.communicator=staged'; then
  ok "kill -9 + resume on the $DEV: steps 11-20 bitwise equal (np 1, np 2 staged)"
else bad "kill -9 + resume on the $DEV (see resume.log)"; tail -5 "$WORK/resume.log" | tee -a "$SUMMARY"; fi

# checkpoints written from GPU shards: the bitwise comparison with a CPU-written file of the same
# values is the ctest test_checkpoint_device_cuda; here the GPU run's final checkpoint verifies
# (checksums, finite values, shapes) and its step-10 checkpoint resumes on the CPU at np 2.
if stage ckpt 90 bash -c '"$BIN/convert-checkpoint" verify "$RUNS/gpu1/ckpt/step_00000020.h5" &&
    mkdir -p "$RUNS/cpu_from_gpu/ckpt" && cp "$RUNS/gpu1/ckpt/step_00000010.h5" "$RUNS/cpu_from_gpu/ckpt/" &&
    train cpu_from_gpu 2 --set runtime.device=cpu && grep -q "resumed from" "$RUNS/cpu_from_gpu.log"'; then
  same_maths cpu_from_gpu gpu1 >> "$WORK/ckpt.log" 2>&1 \
    && ok "$DEV checkpoint verifies; resumed on the CPU at np 2: $(tail -1 "$WORK/ckpt.log")" \
    || bad "CPU resume of a $DEV checkpoint: $(tail -1 "$WORK/ckpt.log")"
else bad "$DEV checkpoint verify / CPU resume (see ckpt.log, runs/cpu_from_gpu.log)"; fi

# ---- the suite's verdict
if ! wait "$ctest_pid"; then
  bad "ctest ${CTEST_ARGS[*]}: $(grep -E 'tests passed|tests failed' "$WORK/ctest.log" | tail -1)"
  grep -E '\((Failed|SEGFAULT|Timeout|Subprocess aborted|Exception)' "$WORK/ctest.log" | tee -a "$SUMMARY"
  grep -q "tests passed" "$WORK/ctest.log" || say "     ctest did not finish within ${ctest_limit} s"
else ok "ctest ${CTEST_ARGS[*]}: $(grep -E 'tests passed' "$WORK/ctest.log")"; fi
cp "$WORK/ctest.log" "$OUT/ctest.log"

# ---- run-time binding of std::filesystem in a test binary (PyTorch's pip LibTorch exports its own
# copies): every such symbol must bind to libstdc++.so.6, or to wmtp's own objects (the test binary,
# libwmtp*.so: inline members such as path's destructor, compiled from the same libstdc++ headers,
# which the linker exports from the executable when a library refers to them).
if [ -x "$BUILD/tests/ckpt/test_ckpt_errors" ]; then
  rm -f "$WORK"/ld-bindings.*
  (cd "$BUILD" && LD_DEBUG=bindings LD_DEBUG_OUTPUT="$WORK/ld-bindings" timeout 120 tests/ckpt/test_ckpt_errors \
     > "$WORK/binding-run.log" 2>&1)
  cat "$WORK"/ld-bindings.* 2>/dev/null | grep "normal symbol \`_ZNSt10filesystem" |
    sed -E 's/^ *[0-9]+: *//' | sort | uniq -c | sort -rn > "$WORK/binding.log"
  n_all=$(awk '{s += $1} END {print s + 0}' "$WORK/binding.log")
  elsewhere=$(grep -v " to [^ ]*libstdc++\.so\.6 " "$WORK/binding.log" |
    grep -vE " to (tests/ckpt/test_ckpt_errors|[^ ]*/libwmtp[^ /]*\.so) ")
  n_own=$(grep -E " to (tests/ckpt/test_ckpt_errors|[^ ]*/libwmtp[^ /]*\.so) " "$WORK/binding.log" | awk '{s += $1} END {print s + 0}')
  rm -f "$WORK"/ld-bindings.*
  if [ "$n_all" -gt 0 ] && [ -z "$elsewhere" ]; then ok "binding: of test_ckpt_errors' $n_all std::filesystem bindings, $((n_all - n_own)) go to libstdc++.so.6, $n_own to wmtp's own inline copies, none elsewhere"
  elif [ "$n_all" = 0 ]; then bad "binding: no std::filesystem binding seen (see binding-run.log)"
  else bad "binding: $(wc -l <<<"$elsewhere") std::filesystem symbol(s) bound elsewhere, e.g. $(head -1 <<<"$elsewhere")"; fi
else bad "binding: $BUILD/tests/ckpt/test_ckpt_errors is not built"; fi

dec_table() {  # "plain, batch 1 41.2 tok/s (...)": the bench table's medians, from log $1
  awk -F'|' '/^\| (plain|speculative [0-9]), batch/ {
      gsub(/^ +| +$/, "", $2); split($3, t, " "); gsub(/ /, "", $6); gsub(/^ +| +$/, "", $7);
      printf "%s%s %s tok/s (%.3f tokens/forward, forward %s plain, %s over plain)", sep, $2, t[1], $4, $6, $7; sep = "; " }' "$1"
}

# ---- decoding: plain vs self-speculative on random weights of the 1B shape (the rehearsal: small, CPU)
DEC_BENCH=$BUILD/bench/bench-generate-throughput
[ -x "$DEC_BENCH" ] || [ "$REHEARSE" = 0 ] || DEC_BENCH=build-torch2/bench/bench-generate-throughput  # make bench's
if [ -x "$DEC_BENCH" ] || { [ "$REHEARSE" = 0 ] && [ "$(left)" -gt 120 ] &&
     cmake --build "$BUILD" -j "$(nproc)" --target bench-generate-throughput > "$WORK/decode-build.log" 2>&1; }; then
  if [ "$REHEARSE" = 1 ]; then dec_args=(--random small --device cpu --dtype fp32 --max-new-tokens 16 --rounds 1)
  else dec_args=(--random 1b --device cuda --dtype bf16 --max-new-tokens 64 --rounds 3); fi
  if stage decode 120 "$DEC_BENCH" "${dec_args[@]}" --batch 1,8 --speculative 2,4 --temperatures ""; then
    ok "decode ${dec_args[1]} ${dec_args[5]} on the $DEV: $(dec_table "$WORK/decode.log")"
  else bad "decode (decode.log, last lines: $(tail -2 "$WORK/decode.log" | tr '\n' ' '))"; fi
else skip "decode: bench-generate-throughput not built$([ "$REHEARSE" = 1 ] && echo ' (make bench builds it)')"; fi

# ---- decoding with the trained bench model (28:1; its heads draft on real prompts): the speed-up goals
if [ ! -f "$DEC_MODEL" ] || [ ! -f "$DEC_TOKENIZER" ]; then
  skip "decode-model: no $DEC_MODEL or $DEC_TOKENIZER (bench/train-generate-model.sh makes both; carry them)"
elif [ -x "$DEC_BENCH" ]; then
  if [ "$REHEARSE" = 1 ]; then dm_args=(--device cpu --batch 1 --rounds 1 --max-new-tokens 16)
  else dm_args=(--device cuda --batch 1,8 --rounds 3); fi
  if stage decode-model 150 "$DEC_BENCH" --checkpoint "$DEC_MODEL" --tokenizer "$DEC_TOKENIZER" "${dm_args[@]}" \
       --dtype fp32 --speculative 4 --temperatures "" --python none; then
    ok "decode-model (the 28:1 bench model, held-out tasks, fp32, greedy) on the $DEV: $(dec_table "$WORK/decode-model.log")"
  else bad "decode-model (decode-model.log, last lines: $(tail -2 "$WORK/decode-model.log" | tr '\n' ' '))"; fi
else skip "decode-model: bench-generate-throughput not built"; fi

# ---- benches: the 1B bench beside plain PyTorch (scripts/bench-gpu-train.sh), then the peak probe
if gpu_only "scripts/bench-gpu-train.sh"; then
  if stage bench "$(left)" env BUILD="$BUILD" bash scripts/bench-gpu-train.sh; then ok "bench-gpu-train.sh (bench.log)"
  else bad "bench-gpu-train.sh (bench.log, last lines: $(tail -2 "$WORK/bench.log" | tr '\n' ' '))"; fi
  cp "$WORK/bench.log" "$OUT/bench.log" 2>/dev/null
fi
if [ -x "$BUILD/bench/bench-peak-flops" ] || { [ "$REHEARSE" = 0 ] && [ "$(left)" -gt 60 ] &&
     cmake --build "$BUILD" --target bench-peak-flops > "$WORK/bench-build.log" 2>&1; }; then
  stage bench_peak 60 "$BUILD/bench/bench-peak-flops" --device $DEV --dtype "$([ $DEV = cuda ] && echo bf16 || echo fp32)" \
    --rounds 2 && ok "bench-peak-flops: $(tail -1 "$WORK/bench_peak.log")" || bad "bench-peak-flops (bench_peak.log)"
else skip "bench-peak-flops (not built$([ "$REHEARSE" = 1 ] && echo '; make bench builds it'))"; fi

finish
