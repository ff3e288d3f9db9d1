#!/usr/bin/env bash
# Step time on the test hosts, measured and predicted: 2 hosts (scripts/slurm/cluster.sh --hosts 2:
# network namespaces on a bridge; ranks on one host talk through shared memory, across hosts through
# TCP) with both hosts' links slowed by a token bucket (tc tbf, as tests/slurm/test_slurm_slow_host.sh
# does), at each rate of RATES:
#   1. bin/calibrate-machine measures the profile of each layout (np 2 = 2 hosts x 1 rank, np 4 =
#      2 hosts x 2 ranks) at that rate;
#   2. train-baseline runs STEPS steps of a model big enough that communication matters (dim 256,
#      6 layers, n_future 2, vocab 8000, seq 256, micro-batch 1, fp32, full fine-tuning: 9.2M
#      parameters) for each strategy and accumulation; the measured step time is the median of
#      perf/step_time_sec over steps 2..STEPS (step 1 connects and allocates);
#   3. its --dry-run with the layout's profile ([runtime] machine_profile) predicts the step.
# Prints one row per run: rate, np, strategy, accumulation, measured (min-max), predicted, error,
# and the load average when the run started (other sessions share this machine's cores: their load
# slows the measured steps, and the calibration only sees the load of its own two minutes).
# hybrid_shard rows need a build with [sharding] strategy = "hybrid_shard"; without it they are
# reported as missing. Asserts nothing (bench/README.md).
#
#   sudo bash bench/hybrid_step_time.sh            # after make build-torch2; about 30 min
#   RATES="400mbit" STRATEGIES="full_shard" ACCUMS=1 LAYOUTS=4 bash bench/hybrid_step_time.sh
#
# Environment: WMTP_BIN_DIR (default build-torch2/bin), OUT (profiles, logs, runs, table.txt; default
# ${TMPDIR:-/tmp}/bench-hybrid, outside the checkout), RATES (default "400mbit 100mbit"), STEPS (4),
# ACCUMS ("1 4"), LAYOUTS ("2 4"), STRATEGIES ("hybrid_shard full_shard no_shard"), MODEL (extra --set
# arguments for the model).
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
export WMTP_BIN_DIR=${WMTP_BIN_DIR:-$SRC/build-torch2/bin}
export OUT=${OUT:-${TMPDIR:-/tmp}/bench-hybrid}
if [ -z "${WMTP_SLURM_CLUSTER_DIR:-}" ]; then
  mkdir -p "$OUT"
  exec bash "$SRC/scripts/slurm/cluster.sh" run --hosts 2 -- bash "$0" "$@"
fi
source "$SRC/scripts/slurm/test_hosts.sh"
BIN=$WMTP_BIN_DIR C=$WMTP_SLURM_CLUSTER_DIR
RATES=${RATES:-"400mbit 100mbit"} STEPS=${STEPS:-4} ACCUMS=${ACCUMS:-"1 4"} LAYOUTS=${LAYOUTS:-"2 4"}
STRATEGIES=${STRATEGIES:-"hybrid_shard full_shard no_shard"}
SEQ=256
mkdir -p "$OUT/runs" "$OUT/profiles"
cd "$OUT" || exit 1

# Data: long synthetic solutions (about SEQ tokens each with the tiny tokenizer), padded to SEQ.
if [ ! -f data.h5 ]; then
  python3 - "$SEQ" > long.jsonl <<'PY'
import json, sys
seq = int(sys.argv[1])
for i in range(64):
    body = "".join("    total = total + values[%d] * 3\n" % ((i + j) % 17) for j in range(seq // 8))
    for correct in (True, False):
        print(json.dumps({"instruction": "Sum the list, problem %d." % i, "input": "",
                          "output": "def f(values):\n    total = 0\n" + body + "    return total\n",
                          "task_id": "p%d_%s_0" % (i, "correct" if correct else "incorrect"),
                          "is_correct": correct, "metadata": {"difficulty": 3}}))
PY
  bash "$SRC/data/make_tokenizer.sh" tok > prep.log 2>&1 &&
    "$BIN/preprocess-metadata" --input long.jsonl --tokenizer tok.model --output data.h5 --max-length $SEQ \
      --on-overlength truncate >> prep.log 2>&1 || { echo "data preparation failed: $OUT/prep.log"; exit 1; }
fi
model=(-c "$SRC/configs/tiny.toml" --set model.dim=256 --set model.n_layers=6 --set model.n_heads=8
       --set model.n_kv_heads=8 --set model.n_future_tokens=2 --set model.vocab_size=8000
       --set model.multiple_of=256 --set model.max_seq_len=$SEQ --set lora.enabled=false
       --set data.train="$OUT/data.h5" --set data.valid= --set data.max_length=$SEQ --set data.pad_to=max_length
       --set training.micro_batch_size=1 --set training.max_steps=$STEPS --set checkpoint.every=0
       --set checkpoint.save_final=false --set checkpoint.resume=never --set logging.log_interval=1
       --set logging.peak_tflops=1 --set sharding.param_dtype=fp32 --set sharding.reduce_dtype=fp32
       --set runtime.collective_timeout_s=600 ${MODEL:-})
srun_np() {  # srun_np NP CMD...: NP ranks over host1 and host2
  local np=$1; shift
  srun -u --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1 -N 2 -n "$np" --ntasks-per-node=$((np / 2)) \
    -w host1,host2 --export=ALL,OMP_NUM_THREADS=1 "$@"
}
has_hybrid=0
"$BIN/train-baseline" "${model[@]}" --set sharding.strategy=hybrid_shard --print-config > /dev/null 2>&1 && has_hybrid=1

# Median, min and max of perf/step_time_sec over steps 2.., and the dry run's predicted step.
measured() {
  python3 - "$1" <<'PY'
import json, sys
t = sorted(json.loads(l)["perf/step_time_sec"] for l in open(sys.argv[1])
           if '"perf/step_time_sec"' in l and json.loads(l).get("step", 0) >= 2)
print("%.3f %.3f %.3f" % (t[len(t) // 2], t[0], t[-1]) if t else "- - -")
PY
}
predicted() { sed -n 's/^  step  *\([0-9.e+-]*\) s .*/\1/p' "$1" | head -1; }

table=$OUT/table.txt
printf '%-8s %3s %-14s %5s %22s %10s %8s  %s\n' rate np strategy accum "measured s (min-max)" predicted error \
  "load average" | tee "$table"
for rate in $RATES; do
  hosts_rate "$C" 1 "$rate" && hosts_rate "$C" 2 "$rate" || { echo "cannot slow the links to $rate"; exit 1; }
  for np in $LAYOUTS; do
    prof=$OUT/profiles/test-hosts-$rate-np$np.toml
    srun_np "$np" "$BIN/calibrate-machine" --output "$prof" --name "test-hosts-$rate-np$np" \
      > "$OUT/profiles/calibrate-$rate-np$np.log" 2>&1 \
      || { echo "calibration failed: $OUT/profiles/calibrate-$rate-np$np.log"; continue; }
    echo "# profile $prof: $(grep -E '^# (calibration took|overlap|matmul)' "$prof" | tr '\n' ' ')" | tee -a "$table"
    for strategy in $STRATEGIES; do
      if [ "$strategy" = hybrid_shard ] && { [ "$has_hybrid" = 0 ] || [ "$np" -lt 4 ]; }; then
        [ "$np" -ge 4 ] && printf '%-8s %3s %-14s %5s %22s\n' "$rate" "$np" "$strategy" - \
          "missing: this build has no hybrid_shard" | tee -a "$table"
        continue
      fi
      for accum in $ACCUMS; do
        run=$OUT/runs/$rate-np$np-$strategy-a$accum
        rm -rf "$run"
        cfg=("${model[@]}" --set sharding.strategy="$strategy" --set training.global_batch_size=$((np * accum))
             --set training.run_dir="$run" --set checkpoint.dir="$run/ckpt")
        "$BIN/train-baseline" "${cfg[@]}" --dry-run --world-size "$np" --set runtime.machine_profile="$prof" \
          --set runtime.ranks_per_node=$((np / 2)) > "$run.dry" 2>&1
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        srun_np "$np" "$BIN/train-baseline" "${cfg[@]}" > "$run.log" 2>&1 || { echo "run failed: $run.log"; continue; }
        read -r med lo hi <<< "$(measured "$run/metrics.jsonl")"
        pred=$(predicted "$run.dry")
        err=$(python3 -c "print('%+.1f %%' % (100 * ($pred - $med) / $med))" 2>/dev/null || echo -)
        printf '%-8s %3s %-14s %5s %22s %10s %8s  %s\n' "$rate" "$np" "$strategy" "$accum" "$med ($lo-$hi)" \
          "${pred:--}" "$err" "$load" | tee -a "$table"
      done
    done
  done
done
hosts_rate "$C" 1 0; hosts_rate "$C" 2 0
echo "table: $table; profiles, dry runs and logs under $OUT"
