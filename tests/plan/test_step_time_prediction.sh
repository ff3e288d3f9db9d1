#!/usr/bin/env bash
# The time plan against one measured run (scripts/slurm/cluster.sh --hosts 2): host1 and host2's
# links are held to 10 Mbit/s by a token bucket (tc tbf, as in test_slurm_slow_host); bin/calibrate-
# machine measures the profile of 2 hosts x 1 rank over that link; train-baseline (tiny, full
# fine-tuning, fp32, full_shard, accumulation 2) runs 5 steps on the two hosts; its --dry-run with the
# profile predicts the step. Expect: the calibration writes a profile with the inter-node class and
# no intra-node one; the dry run prints compute, exposed communication, step time and tokens/s; the
# link carries at least 80 % of the predicted step; the measured step (median of steps 2-5) is
# within [0.5, 3] x the prediction; the bytes the plan sends across nodes per step are those the run
# counted (perf/comm_bytes_inter_per_step) within 2 % (the step's small all-reduces).
#
# Why load cannot fail it: at 10 Mbit/s the step is the link's time — the kernel's token bucket sets
# it, whatever the CPUs do — for both the calibration's bandwidth and the run (about 3 MB cross per
# step, 5-6 s, against well under 0.3 s of compute). Load cannot make bytes cross faster than the
# bucket lets them, so the measured step cannot fall below the link-bound part of the prediction
# (>= 80 % of it: the lower bound 0.5 has room for the calibration's own error), and what load does
# slow — compute, latencies, MPI's progress — is under a fifth of the step: it would have to grow
# about tenfold beyond what the calibration saw to pass the upper bound 3 (what a load average of 20
# on a 2-core machine does to CPU work). The bytes are counted, not timed: load cannot move them.
set -u
export SLURM_TEST_CLUSTER="--hosts 2"
source "${WMTP_SOURCE_DIR:?}/tests/slurm/slurm_test_lib.sh"
source "$SRC/scripts/slurm/test_hosts.sh"
slurm_test_begin step_time_prediction "$0" "$@"

DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
RATE=10mbit STEPS=5
C=$WMTP_SLURM_CLUSTER_DIR
hosts_rate "$C" 1 $RATE && hosts_rate "$C" 2 $RATE && ok "both hosts' links held to $RATE (tbf)" || bad "cannot slow the links"
on_hosts() { srun -u --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1 -N 2 -n 2 -w host1,host2 --export=ALL,OMP_NUM_THREADS=1 "$@"; }

on_hosts "$BIN/calibrate-machine" --output "$TMP/profile.toml" --name test-hosts --dtypes fp32 --matmul-size 512 \
  --sample-seconds 0.2 > "$TMP/calibrate.log" 2>&1; rc=$?
took=$(sed -n 's/^# calibration took \([0-9.]*\) s/\1/p' "$TMP/profile.toml" 2>/dev/null)
if [ $rc = 0 ] && grep -q '^\[inter\]' "$TMP/profile.toml" && grep -q '^ranks_per_node = 1' "$TMP/profile.toml" \
   && awk -v t="${took:-999}" 'BEGIN { exit !(t < 120) }'; then
  ok "calibrate-machine on 2 hosts x 1 rank: a profile in ${took} s"
else bad "calibrate-machine (exit $rc)"; tail -5 "$TMP/calibrate.log"; fi
grep -E '^# ' "$TMP/profile.toml" | sed -n '2,$p'

common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid= --set lora.enabled=false
        --set training.max_steps=$STEPS --set logging.log_interval=1 --set logging.peak_tflops=1
        --set checkpoint.every=0 --set checkpoint.save_final=false --set training.global_batch_size=16
        --set training.micro_batch_size=4 --set data.pad_to=max_length --set data.max_length=128
        --set training.run_dir="$TMP/run" --set checkpoint.dir="$TMP/run/ckpt")
"$BIN/train-baseline" "${common[@]}" --dry-run --world-size 2 --set runtime.machine_profile="$TMP/profile.toml" \
  --set runtime.ranks_per_node=1 > "$TMP/dry.txt" 2>&1; rc=$?
sed -n '/^time plan/,$p' "$TMP/dry.txt"
if [ $rc = 0 ] && grep -q '^  compute ' "$TMP/dry.txt" && grep -q '^  exposed communication ' "$TMP/dry.txt" \
   && grep -q 'tokens/s' "$TMP/dry.txt"; then ok "--dry-run prints the time plan"
else bad "--dry-run with the profile (exit $rc)"; tail -5 "$TMP/dry.txt"; fi

on_hosts "$BIN/train-baseline" "${common[@]}" > "$TMP/run.log" 2>&1; rc=$?
[ $rc = 0 ] && ok "train-baseline on 2 hosts at $RATE: exit 0" || { bad "run: exit $rc"; tail -5 "$TMP/run.log"; }

python3 - "$TMP/run/metrics.jsonl" "$TMP/dry.txt" <<'PY'
import json, re, sys
steps = sorted(json.loads(l)["perf/step_time_sec"] for l in open(sys.argv[1])
               if '"perf/step_time_sec"' in l and json.loads(l).get("step", 0) >= 2)
plan = open(sys.argv[2]).read()
step = float(re.search(r"^  step +([0-9.e+-]+) s", plan, re.M).group(1))
comm = float(re.search(r"^  communication +([0-9.e+-]+) s", plan, re.M).group(1))
measured = steps[len(steps) // 2]
print("measured step %.3f s (median of %d; min %.3f, max %.3f), predicted %.3f s (communication %.3f s): "
      "measured / predicted = %.2f" % (measured, len(steps), steps[0], steps[-1], step, comm, measured / step))
ok = comm >= 0.8 * step
print(("ok   " if ok else "FAIL ") + "the link carries at least 80 %% of the predicted step (%.0f %%)" % (100 * comm / step))
within = 0.5 <= measured / step <= 3
print(("ok   " if within else "FAIL ") + "measured step within [0.5, 3] x the prediction")
# The bytes the plan sends across nodes per step against the run's own counters (no timing at all).
m = re.search(r"sent per step \(ring\) +([0-9]+) B across nodes", plan)
planned = float(m.group(1)) if m else float("nan")
counted = sorted(json.loads(l)["perf/comm_bytes_inter_per_step"] for l in open(sys.argv[1])
                 if '"perf/comm_bytes_inter_per_step"' in l and json.loads(l).get("step", 0) >= 2)
counted = counted[len(counted) // 2] if counted else float("nan")
same = abs(planned - counted) <= 0.02 * counted
print(("ok   " if same else "FAIL ") + "bytes across nodes per step: planned %.4g, counted %.4g (perf/comm_bytes_inter_per_step)"
      % (planned, counted))
sys.exit(0 if ok and within and same else 1)
PY
[ $? = 0 ] && passes=$((passes + 1)) || fails=$((fails + 1))
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
hosts_rate "$C" 1 0; hosts_rate "$C" 2 0
slurm_test_end
