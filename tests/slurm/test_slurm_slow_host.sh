#!/usr/bin/env bash
# A slow host (scripts/slurm/cluster.sh --hosts 2): train-baseline (tiny, fp32) on host1 + host2,
# once as is and once with host2's link slowed: netem delay 50 ms on every packet to host2, or, on a
# kernel without sch_netem (tc: "Specified qdisc kind is unknown"), a token bucket of 20 mbit/s
# (tbf). Expect: both runs complete with bitwise the same losses (a slow peer changes when the
# collectives finish, never what they compute), and the per-phase timings in metrics.jsonl (the
# console's perf/phase_*) show where the time went: perf/phase_allgather_wait_ms and
# perf/phase_reduce_scatter_wait_ms, the engine waiting on the communicator. The figures of both runs
# are printed, not asserted (no timing assertions: a loaded machine moves them).
set -u
export SLURM_TEST_CLUSTER="--hosts 2"
source "$(dirname "$0")/slurm_test_lib.sh"
source "$SRC/scripts/slurm/test_hosts.sh"
slurm_test_begin slurm_slow_host "$0" "$@"

DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
STEPS=4 DELAY_MS=50 RATE=20mbit
C=$WMTP_SLURM_CLUSTER_DIR
common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5"
        --set data.val_n_samples=4 --set training.max_steps=$STEPS --set logging.log_interval=1
        --set runtime.collective_timeout_s=120)
train() {  # train NAME: 2 hosts x 1 rank, its run in $TMP/NAME
  srun -l -u --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1 -N 2 -n 2 -w host1,host2 "$BIN/train-baseline" "${common[@]}" \
    --set checkpoint.dir="$TMP/$1/ckpt" --set training.run_dir="$TMP/$1" > "$TMP/$1.log" 2>&1
}

train plain; rc=$?
[ "$rc" = 0 ] && ok "undelayed run: exit 0" || { bad "undelayed run: exit $rc"; tail -5 "$TMP/plain.log"; }

if hosts_delay "$C" 2 "$DELAY_MS" 2> "$TMP/netem.err"; then how="netem delay $DELAY_MS ms"
else
  echo "netem is not available here ($(tr '\n' ' ' < "$TMP/netem.err")): the kernel ($(uname -r)) has no sch_netem" \
       "and no module to load; slowing host2's link with a token bucket (tbf, $RATE) instead"
  hosts_rate "$C" 2 "$RATE" && how="tbf rate $RATE" || how=""
fi
qdisc=$(hosts_root "$C" tc qdisc show dev "$(hosts_veth "$C" 2)")
echo "host2's link: $qdisc"
[ -n "$how" ] && echo "$qdisc" | grep -qE "qdisc (netem|tbf)" && ok "host2's link slowed: $how" || bad "could not slow host2's link"

train slow; rc=$?
hosts_delay "$C" 2 0
[ "$rc" = 0 ] && ok "run with host2 slowed ($how): exit 0" || { bad "slowed run: exit $rc"; tail -5 "$TMP/slow.log"; }

losses "$TMP/plain/metrics.jsonl" > "$TMP/plain.losses"; losses "$TMP/slow/metrics.jsonl" > "$TMP/slow.losses"
echo "--- losses: undelayed | host2 slowed"; paste "$TMP/plain.losses" "$TMP/slow.losses"
[ "$(wc -l < "$TMP/plain.losses")" = $STEPS ] && cmp -s "$TMP/plain.losses" "$TMP/slow.losses" \
  && ok "all $STEPS losses bitwise equal with host2 slowed" || bad "losses differ or steps missing"

# Per-phase timings, ms per step (the largest over ranks), mean over steps 2..N (step 1 connects).
phases() {
  python3 - "$1" <<'PY'
import json, sys
keys = ["perf/phase_allgather_wait_ms", "perf/phase_reduce_scatter_wait_ms", "perf/phase_step_ms"]
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "perf/phase_step_ms" in r and r.get("step", 0) >= 2]
if not rows or any(k not in r for r in rows for k in keys): sys.exit(1)
print(" ".join("%.1f" % (sum(r[k] for r in rows) / len(rows)) for k in keys))
PY
}
p=$(phases "$TMP/plain/metrics.jsonl"); prc=$?; s=$(phases "$TMP/slow/metrics.jsonl"); src=$?
echo "--- ms per step, mean of steps 2-$STEPS:   allgather_wait  reduce_scatter_wait  step"
echo "undelayed:           $p"
echo "host2 slowed ($how): $s"
[ "$prc" = 0 ] && [ "$src" = 0 ] && ok "both runs log perf/phase_allgather_wait_ms, perf/phase_reduce_scatter_wait_ms" \
  || bad "per-phase wait timings missing from metrics.jsonl"

slurm_test_end
