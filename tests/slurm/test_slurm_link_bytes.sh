#!/usr/bin/env bash
# Bytes across nodes, counted and measured (scripts/slurm/cluster.sh --hosts 2): train-baseline
# (full fine-tuning, fp32, dim 128) at 2 hosts x 2 ranks under hybrid_shard (groups of 2: a host's
# ranks; the replicas {0, 2} and {1, 3} across) and under full_shard. Each host's interface counters
# (`ip -s link` of eth0 inside its namespace) are read before and after a run of 2 steps and one of 6;
# the difference between the two runs, over 4 steps, is what 4 steps send (start-up, connection set-up
# and the end of the run cancel out). Expect, under hybrid_shard: each host's transmitted bytes per
# step within 10 % of the across-node figure the ranks counted (the sum over ranks of
# perf/comm_bytes_inter_per_step: perf/comm_bytes_inter_all_ranks_per_step, half of it per host, the
# layout being symmetric), and every rank sending the same. The rest is printed: the TCP/IP and
# Ethernet headers (66 bytes a packet, packets from the counters), the acknowledgements of what the
# host receives, and Open MPI's own headers. Under full_shard the figures are printed, not asserted:
# Open MPI's algorithms for 4 ranks send more across the hosts than the ring the counters count
# (docs/sharding.md, "Bytes by link").
set -u
export SLURM_TEST_CLUSTER="--hosts 2"
source "$(dirname "$0")/slurm_test_lib.sh"
source "$SRC/scripts/slurm/test_hosts.sh"
slurm_test_begin slurm_link_bytes "$0" "$@"

DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
C=$WMTP_SLURM_CLUSTER_DIR
SHORT=2 LONG=6
common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid= --set lora.enabled=false
        --set model.dim=128 --set logging.log_interval=1 --set checkpoint.every=0
        --set checkpoint.save_final=false --set checkpoint.resume=never --set runtime.collective_timeout_s=120)

# tx HOST: bytes and packets host HOST's eth0 has sent, "bytes packets".
tx() {
  ip -n "$(hosts_ns "$C" "$1")" -s -j link show eth0 | python3 -c '
import json, sys; s = json.load(sys.stdin)[0]["stats64"]["tx"]; print(s["bytes"], s["packets"])'
}

# run NAME STRATEGY STEPS: 2 hosts x 2 ranks; its run in $TMP/NAME; "host1_bytes host1_packets host2_bytes host2_packets" sent.
run() {
  local a1 a2 b1 b2
  a1=$(tx host1); a2=$(tx host2)
  srun -l -u --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1 -N 2 -n 4 --ntasks-per-node=2 -w host1,host2 \
    "$BIN/train-baseline" "${common[@]}" --set sharding.strategy="$2" --set training.max_steps="$3" \
    --set checkpoint.dir="$TMP/$1/ckpt" --set training.run_dir="$TMP/$1" > "$TMP/$1.log" 2>&1 || return 1
  b1=$(tx host1); b2=$(tx host2)
  python3 -c 'import sys; a1, p1, a2, p2, b1, q1, b2, q2 = map(int, sys.argv[1:]); print(b1 - a1, q1 - p1, b2 - a2, q2 - p2)' \
    $a1 $a2 $b1 $b2
}

# counted RUN_DIR: the mean over steps 2.. of "inter_max inter_all_ranks intra_max" per step.
counted() {
  python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "perf/comm_bytes_inter_per_step" in r and r["step"] >= 2]
keys = ["perf/comm_bytes_inter_per_step", "perf/comm_bytes_inter_all_ranks_per_step", "perf/comm_bytes_intra_per_step"]
if not rows: sys.exit(1)
print(" ".join("%.0f" % (sum(r[k] for r in rows) / len(rows)) for k in keys))
PY
}

echo "--- per step; interface figures from the runs of $SHORT and $LONG steps, counted figures from metrics.jsonl"
printf "%-12s %14s %14s %14s %14s %10s %10s\n" strategy counted/host host1_tx host2_tx headers/host host1_err host2_err
for strategy in hybrid_shard full_shard; do
  short=$(run "${strategy}_short" "$strategy" $SHORT) || { bad "$strategy: the $SHORT-step run failed"; tail -5 "$TMP/${strategy}_short.log"; continue; }
  long=$(run "${strategy}_long" "$strategy" $LONG) || { bad "$strategy: the $LONG-step run failed"; tail -5 "$TMP/${strategy}_long.log"; continue; }
  c=$(counted "$TMP/${strategy}_long") || { bad "$strategy: no perf/comm_bytes_* in metrics.jsonl"; continue; }
  read -r inter_max inter_all intra_max <<< "$c"
  read -r s1 sp1 s2 sp2 <<< "$short"
  read -r l1 lp1 l2 lp2 <<< "$long"
  row=$(python3 - "$strategy" $s1 $sp1 $s2 $sp2 $l1 $lp1 $l2 $lp2 $inter_max $inter_all $((LONG - SHORT)) <<'PY'
import sys
name = sys.argv[1]
s1, sp1, s2, sp2, l1, lp1, l2, lp2, inter_max, inter_all, steps = map(float, sys.argv[2:])
per_host = inter_all / 2  # two hosts, the same layout on each
tx1, tx2 = (l1 - s1) / steps, (l2 - s2) / steps
hdr = ((lp1 - sp1) + (lp2 - sp2)) / 2 / steps * 66
e1, e2 = (tx1 - per_host) / per_host, (tx2 - per_host) / per_host
print("%-12s %14.0f %14.0f %14.0f %14.0f %+9.1f%% %+9.1f%%" % (name, per_host, tx1, tx2, hdr, 100 * e1, 100 * e2))
print("ERR %.4f %.4f" % (e1, e2))
PY
)
  echo "$row" | grep -v '^ERR'
  read -r _ e1 e2 <<< "$(echo "$row" | grep '^ERR')"
  if [ "$strategy" = hybrid_shard ]; then
    [ "$inter_max" -gt 0 ] && python3 -c "import sys; sys.exit(0 if abs($inter_all - 4 * $inter_max) <= 0.01 * $inter_all else 1)" \
      && ok "hybrid_shard: every rank sends the same across hosts ($inter_max bytes per step), nothing else counted across" \
      || bad "hybrid_shard: ranks send different amounts across ($inter_max max, $inter_all in all)"
    python3 -c "import sys; sys.exit(0 if abs($e1) <= 0.10 and abs($e2) <= 0.10 else 1)" \
      && ok "hybrid_shard: both hosts' interfaces within 10 % of the counted across-node bytes per step" \
      || bad "hybrid_shard: an interface is off the counted across-node bytes by more than 10 % ($e1, $e2)"
  fi
done
slurm_test_end
