#!/usr/bin/env bash
# The time-limit path of sbatch/train.sbatch, driven by Slurm itself: `#SBATCH --signal=B:USR1@600`
# with a 10-minute limit puts the job inside the lead time from its start, so slurmctld signals the
# batch script at its next periodic check (every 30 s). The program is a stand-in that keeps the
# trainers' contract (SIGUSR1 -> exit 75 on every task; exit 0 once resumed), so this test costs
# no CPU and runs the unchanged script through both launchers at once:
#  - srun and mpirun jobs each receive USR1 from Slurm before the time limit, every task gets it,
#    the program exits 75, the script requeues, the restart (SLURM_RESTART_COUNT=1) exits 0;
#  - the test raises the limit once the job is requeued, as an operator would, so the restart is not
#    signalled again. (The training itself under USR1 is test_slurm_train's.)
#  - a plain `scancel` (SIGTERM, which the trainers answer like USR1 when they can) stops the job:
#    the program exits 75 and the script does not requeue the cancelled job, which stays CANCELLED.
set -u
source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_begin slurm_time_limit "$0" "$@"

mkdir -p "$TMP/fakebin"
cat > "$TMP/fakebin/train-standin" <<'EOF'
#!/bin/bash
# Stand-in trainer: one task of the job; stops with 75 on SIGUSR1 or SIGTERM, finishes with 0 after a restart.
task=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-?}}
if [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]; then echo "standin: task $task resumed, done"; exit 0; fi
trap 'echo "standin: task $task got USR1 at $(date +%s)"; exit 75' USR1
trap 'echo "standin: task $task got TERM"; exit 75' TERM
echo "standin: task $task running at $(date +%s)"
for _ in $(seq 1 1200); do sleep 0.1; done
echo "standin: task $task was never signalled"; exit 1
EOF
chmod +x "$TMP/fakebin/train-standin"

declare -A jid
for l in srun mpirun; do
  jid[$l]=$(WMTP_BIN=$TMP/fakebin PROGRAM=train-standin CONFIG=none LAUNCHER=$l \
    sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0 --time=10 \
    --job-name="tl-$l" "$SRC/sbatch/train.sbatch")
  jid[$l]=${jid[$l]%%;*}
done

# A third job, cancelled with a plain scancel once its tasks run.
cid=$(WMTP_BIN=$TMP/fakebin PROGRAM=train-standin CONFIG=none sbatch --parsable --nodes=2 --ntasks-per-node=1 \
  --cpus-per-task=1 --gpus-per-node=0 --time=30 --job-name=cancel "$SRC/sbatch/train.sbatch")
cid=${cid%%;*}; clog=$TMP/logs/cancel_$cid.out
for _ in $(seq 1 600); do [ "$(grep -c "standin: task [01] running" "$clog" 2>/dev/null)" = 2 ] && break; sleep 0.1; done
scancel "$cid"

# Raise each job's limit once it has been requeued (pending again), so the restart runs in peace.
deadline=$(( $(date +%s) + 150 ))
declare -A raised=()
while [ "$(date +%s)" -lt "$deadline" ] && [ ${#raised[@]} -lt 2 ]; do
  for l in srun mpirun; do
    [ -n "${raised[$l]:-}" ] && continue
    if grep -q "requeueing" "$TMP/logs/tl-${l}_${jid[$l]}.out" 2>/dev/null; then
      scontrol update JobId="${jid[$l]}" TimeLimit=30 && raised[$l]=1
    fi
  done
  sleep 0.5
done

for l in srun mpirun; do
  id=${jid[$l]}; log=$TMP/logs/tl-${l}_$id.out
  wait_job "$id" 60 COMPLETED FAILED CANCELLED TIMEOUT > /dev/null
  echo "--- $l job log"; cat "$log"; echo "---"
  start=$(sed -n 's/.*standin: task 0 running at \([0-9]*\).*/\1/p' "$log" | head -1)
  got=$(sed -n 's/.*standin: task 0 got USR1 at \([0-9]*\).*/\1/p' "$log" | head -1)
  grep -q "wmtp-job: SIGUSR1" "$log" && [ "$(grep -c "standin: task [01] got USR1" "$log")" = 2 ] \
    && ok "$l: Slurm signalled the batch script; both tasks got USR1, $(( ${got:-0} - ${start:-0} )) s after they started" \
    || bad "$l: USR1 did not reach the script and both tasks"
  grep -q "exited 75" "$log" && grep -q "requeueing (restart 1" "$log" && ok "$l: exit 75, requeued" || bad "$l: no exit 75 + requeue"
  grep -q "restart=1 " "$log" && grep -q "exited 0 " "$log" && ok "$l: restart 1 exited 0" || bad "$l: no clean restart"
  st=$(job_field "$id" JobState); r=$(job_field "$id" Restarts)
  [ "$st" = COMPLETED ] && [ "$r" = 1 ] && ok "$l: job COMPLETED after 1 requeue" || bad "$l: job $st, restarts $r"
done

# The cancelled job: wait for the script's last word, then Slurm's view (a requeue would show at once).
for _ in $(seq 1 600); do grep -q "requeueing\|not requeueing" "$clog" 2>/dev/null && break; sleep 0.1; done
sleep 2
echo "--- cancelled job log"; cat "$clog"; echo "---"
grep -q "standin: task 0 got TERM" "$clog" && grep -q "exited 75" "$clog" && ok "scancel: the program got SIGTERM and exited 75" \
  || bad "scancel: no SIGTERM + exit 75 in the log"
st=$(job_field "$cid" JobState); r=$(job_field "$cid" Restarts)
[ "$st" = CANCELLED ] && [ "$r" = 0 ] && ! grep -q "restart=1 " "$clog" && grep -q "not requeueing" "$clog" \
  && ok "scancel: job CANCELLED, not requeued" || bad "scancel: job $st, restarts $r (a cancelled job must stay cancelled)"

slurm_test_end
