#!/usr/bin/env bash
# Two hosts for real (scripts/slurm/cluster.sh --hosts 3: three network + UTS namespaces, each its own
# address, hostname and slurmd; the file system shared): train-baseline (tiny, fp32) across hosts.
#  1. 2 hosts x 1 rank through `srun --mpi=pmix`: each rank runs on its own host, Open MPI picks the
#     ob1 PML and connects the ranks with the TCP BTL over the hosts' addresses (Open MPI's own
#     verbose lines, per rank: the transport evidence).
#  2. The same run at 1 host x 2 ranks (shared memory between the ranks) gives bitwise the same
#     losses at every step and the same final checkpoint tensors (h5diff of /model, /optim, /lora).
#  3. The 2-host run's mid-run checkpoint resumes at 1 host and at 3 hosts and runs to the end.
set -u
export SLURM_TEST_CLUSTER="--hosts 3"
source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_begin slurm_hosts "$0" "$@"

DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
STEPS=4
common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5"
        --set data.val_n_samples=4 --set training.max_steps=$STEPS --set checkpoint.every=2
        --set logging.log_interval=1 --set training.global_batch_size=24)  # whole accumulation at 1, 2 and 3 ranks
# --kill-on-bad-exit: a rank that crashes (seen once: a segfault of rank 1 on host2 at start-up,
# before the program printed anything) ends the step and fails the test instead of leaving the other
# ranks waiting, before the watchdog exists, until ctest's timeout.
train() {  # train NAME SRUN-SHAPE...: train-baseline under srun, its run in $TMP/NAME
  local name=$1; shift
  srun -l -u --mpi=pmix --cpu-bind=none --kill-on-bad-exit=1 "$@" "$BIN/train-baseline" "${common[@]}" \
    --set checkpoint.dir="$TMP/$name/ckpt" --set training.run_dir="$TMP/$name" > "$TMP/$name.log" 2>&1
}

# 1+2. Both shapes side by side; Open MPI names its PML and BTL choices (MCA verbose, per rank).
OMPI_MCA_pml_base_verbose=10 OMPI_MCA_btl_base_verbose=30 train two -N 2 -n 2 -w host1,host2 &
two_pid=$!
OMPI_MCA_pml_base_verbose=10 OMPI_MCA_btl_base_verbose=30 train one -N 1 -n 2 -w host3 &
one_pid=$!
wait $two_pid; two_rc=$?; wait $one_pid; one_rc=$?
[ "$two_rc" = 0 ] && ok "2 hosts x 1 rank: exit 0" || { bad "2 hosts x 1 rank: exit $two_rc"; grep -v "mca\|btl\|select" "$TMP/two.log" | tail -5; }
[ "$one_rc" = 0 ] && ok "1 host x 2 ranks: exit 0" || { bad "1 host x 2 ranks: exit $one_rc"; grep -v "mca\|btl\|select" "$TMP/one.log" | tail -5; }

echo "--- transport, as Open MPI reports it (2 hosts)"
grep -E "select: component ob1 selected|btl:tcp: (now connected to|connect\(\) to .* completed)|world 2 rank" "$TMP/two.log" | cut -c1-160
for r in 0 1; do
  h=host$((r + 1)); peer=10.231.0.$((12 - r))
  grep -qE "^$r: \[$h:[0-9]+\] select: component ob1 selected" "$TMP/two.log" \
    && grep -qE "^$r: \[$h:[0-9]+\] btl:tcp: (now connected to $peer|connect\(\) to $peer:[0-9]+ completed)" "$TMP/two.log" \
    && ok "rank $r on $h: PML ob1, BTL tcp to $peer" || bad "rank $r: no ob1 + tcp-to-$peer lines from $h"
done
grep -q "world 2 rank(s) on 2 node(s), 1 on this node (host1)" "$TMP/two.log" && ok "the trainer sees 2 nodes (host1, ...)" \
  || bad "start-up line does not show 2 nodes"
grep -qE "btl:tcp: (now connected|connect\(\))" "$TMP/one.log" && bad "1 host x 2 ranks used TCP (expected shared memory)" \
  || ok "1 host x 2 ranks: no TCP connection between its ranks"

losses "$TMP/two/metrics.jsonl" > "$TMP/two.losses"; losses "$TMP/one/metrics.jsonl" > "$TMP/one.losses"
echo "--- losses, 2 hosts | 1 host"; paste "$TMP/two.losses" "$TMP/one.losses"
if [ "$(wc -l < "$TMP/two.losses")" = $STEPS ] && cmp -s "$TMP/two.losses" "$TMP/one.losses"; then
  ok "all $STEPS losses bitwise equal (2 hosts x 1 rank = 1 host x 2 ranks)"
else bad "losses differ or steps missing"; fi
last=$(printf 'step_%08d.h5' $STEPS)
diffs=0
for g in /model /optim /lora; do
  h5diff "$TMP/two/ckpt/$last" "$TMP/one/ckpt/$last" "$g" > "$TMP/h5diff$(echo $g | tr / _).txt" 2>&1 || diffs=$((diffs + 1))
done
[ -f "$TMP/two/ckpt/$last" ] && [ "$diffs" = 0 ] && ok "final checkpoints: /model, /optim, /lora bitwise equal (h5diff)" \
  || { bad "final checkpoints differ ($diffs group(s))"; head -5 "$TMP"/h5diff_*.txt; }

# 3. The step-2 checkpoint written by 2 hosts, resumed at 1 host and at 3 hosts.
mid=$(printf 'step_%08d.h5' 2)
for n in 1 3; do
  mkdir -p "$TMP/resume$n/ckpt"; cp "$TMP/two/ckpt/$mid" "$TMP/resume$n/ckpt/"; echo "$mid" > "$TMP/resume$n/ckpt/latest"
done
train resume1 -N 1 -n 1 -w host1 & r1=$!
train resume3 -N 3 -n 3 & r3=$!
wait $r1; rc1=$?; wait $r3; rc3=$?
for n in 1 3; do
  rc=$rc1; [ $n = 3 ] && rc=$rc3
  if [ "$rc" = 0 ] && grep -q "resumed from .*$mid" "$TMP/resume$n.log" && grep -q "world $n rank(s) on $n node(s)" "$TMP/resume$n.log" \
     && [ "$(losses "$TMP/resume$n/metrics.jsonl" | awk '{print $1}' | tr '\n' ' ')" = "3 4 " ]; then
    ok "2-host checkpoint resumed at $n host(s): steps 3-$STEPS, exit 0"
  else bad "resume at $n host(s): exit $rc"; grep -v "mca\|btl\|select" "$TMP/resume$n.log" | tail -5; fi
done

slurm_test_end
