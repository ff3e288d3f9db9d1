#!/usr/bin/env bash
# sbatch/train.sbatch under real Slurm (two slurmd on this host), submitted unchanged except for the
# resources a CPU test machine has (sbatch options override #SBATCH lines):
#  1. train-baseline at 2 tasks on 2 nodes through `srun --mpi=pmix`: the program sees the launcher's
#     shape (2 nodes, local rank 0 of 1 on each).
#  2. SIGUSR1 reaches the batch script the way `--signal=B:USR1@...` delivers it at the time limit
#     (scancel --signal=USR1 --batch, sent once step 2 is logged: the time-limit signal itself may
#     come up to 60 s early and needs a time limit of minutes, which would make this test slow and
#     timing-dependent); the script passes it to srun, the ranks checkpoint and exit 75, the script
#     requeues, Slurm restarts the job (same id, SLURM_RESTART_COUNT=1), it resumes from that
#     checkpoint and finishes with exit 0.
#  3. The losses of every step equal, bitwise, those of an uninterrupted run of the same config at
#     2 ranks started with plain mpirun outside Slurm (both runs must have all steps).
#  4. A launch without PMIx (`srun --mpi=none`) stops with the fix named, not with N "rank 0"s.
#  5. Resuming at another node count: a new job at 1 node x 2 tasks continues from a copy of the
#     signal's checkpoint and also matches the uninterrupted run bitwise (same world size).
set -u
source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_begin slurm_train "$0" "$@"

DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
STEPS=${SLURM_TEST_STEPS:-20}
common=(--set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5" --set training.max_steps="$STEPS"
        --set checkpoint.every=0 --set logging.log_interval=1 --set logging.peak_tflops=1.0)
# Resources of this machine instead of the script's GPU nodes; everything else is the script's own.
resources=(--nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0 --time=30)  # > the script's 600 s signal lead

# 1+2. The job. checkpoint.every=0: the only checkpoint before the end is the one the signal asks for.
jid=$(WMTP_BIN=$BIN PROGRAM=train-baseline CONFIG="$SRC/configs/tiny.toml" \
      sbatch --parsable "${resources[@]}" --job-name=requeue "$SRC/sbatch/train.sbatch" "${common[@]}" \
      --set checkpoint.dir="$TMP/job/ckpt" --set training.run_dir="$TMP/job")
jid=${jid%%;*}
log=$TMP/logs/requeue_$jid.out
[ -n "$jid" ] && ok "submitted job $jid" || bad "sbatch failed"

# 3. The reference, meanwhile: the same config at 2 ranks, uninterrupted, no Slurm.
$MPIEXEC $MPIEXEC_FLAGS -np 2 "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" "${common[@]}" \
  --set checkpoint.dir="$TMP/ref/ckpt" --set training.run_dir="$TMP/ref" > "$TMP/ref.log" 2>&1 &
ref_pid=$!

# Signal once step 3 is in metrics.jsonl (the job is running and past its first steps).
signalled=0
for _ in $(seq 1 1200); do
  if [ -f "$TMP/job/metrics.jsonl" ] && losses "$TMP/job/metrics.jsonl" | awk '$1 >= 2 {f=1} END {exit !f}'; then
    scancel --signal=USR1 --batch "$jid" && signalled=1
    break
  fi
  [ "$(job_field "$jid" JobState)" = FAILED ] && break
  sleep 0.1
done
[ "$signalled" = 1 ] && ok "USR1 sent to the batch script after step 2" || bad "job never logged step 2 ($(job_field "$jid" JobState))"

# 5. Another node count: as soon as the first run has exited 75, a new job at 1 node x 2 tasks (the
#    same world size) resumes from a copy of its checkpoint, beside the requeued job.
for _ in $(seq 1 1200); do grep -q "exited 75" "$log" 2>/dev/null && break; sleep 0.1; done
mkdir -p "$TMP/onenode"; cp -r "$TMP/job/ckpt" "$TMP/onenode/ckpt"
jid1=$(WMTP_BIN=$BIN PROGRAM=train-baseline CONFIG="$SRC/configs/tiny.toml" \
       sbatch --parsable --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --time=30 --job-name=onenode \
       "$SRC/sbatch/train.sbatch" "${common[@]}" --set checkpoint.dir="$TMP/onenode/ckpt" --set training.run_dir="$TMP/onenode")
jid1=${jid1%%;*}

if wait_job "$jid" 240 COMPLETED FAILED CANCELLED TIMEOUT; then :; fi
state=$(job_field "$jid" JobState); restarts=$(job_field "$jid" Restarts); exitc=$(job_field "$jid" ExitCode)
[ "$state" = COMPLETED ] && [ "$restarts" = 1 ] && [ "$exitc" = 0:0 ] \
  && ok "job COMPLETED after 1 requeue (exit $exitc)" || bad "job ended $state, restarts $restarts, exit $exitc"

echo "--- job log"; cat "$log" 2>/dev/null | grep -v '"step"' | tail -40; echo "---"
grep -q "restart=0 " "$log" && grep -q "restart=1 " "$log" && ok "one log file across the requeue (restart=0, restart=1)" \
  || bad "log does not show both starts"
grep -q "wmtp-job: SIGUSR1" "$log" && ok "batch script received USR1" || bad "no USR1 in the batch script"
grep -q "exited 75" "$log" && grep -q "requeueing (restart 1" "$log" && ok "program exited 75; script requeued" \
  || bad "no exit 75 + requeue in the log"
grep -q "exited 0 " "$log" && ok "resumed run exited 0" || bad "resumed run did not exit 0"
# The multi-node shape, as the program saw it (MpiEnv::describe in the trainer's start-up line).
grep -q "world 2 rank(s) on 2 node(s), 1 on this node" "$log" && grep -q "launcher srun (pmix): task 0 of 2, node 0 of 2, local 0 of 1" "$log" \
  && ok "ranks see 2 nodes x 1 task from srun" || bad "start-up line does not show 2 nodes x 1 task under srun"
k=$(sed -n 's/.*resumed from .*step_0*\([0-9][0-9]*\)\.h5.*/\1/p' "$log" | head -1)
if [ -n "$k" ] && [ "$k" -ge 2 ] && [ "$k" -lt "$STEPS" ]; then ok "resumed from the step-$k checkpoint the signal wrote"
else bad "no resume from a checkpoint between step 2 and $STEPS (got '${k}')"; fi

wait $ref_pid; ref_rc=$?
[ "$ref_rc" = 0 ] && ok "reference run (mpirun -np 2, uninterrupted)" || { bad "reference run exit $ref_rc"; tail -5 "$TMP/ref.log"; }
losses "$TMP/ref/metrics.jsonl" > "$TMP/ref.losses"; losses "$TMP/job/metrics.jsonl" > "$TMP/job.losses"
nref=$(wc -l < "$TMP/ref.losses"); njob=$(wc -l < "$TMP/job.losses")
if [ "$nref" = "$STEPS" ] && [ "$njob" = "$STEPS" ] && diff "$TMP/ref.losses" "$TMP/job.losses" > "$TMP/diff.txt"; then
  ok "all $STEPS losses bitwise equal to the uninterrupted run"
else bad "losses: reference $nref steps, job $njob steps"; head -5 "$TMP/diff.txt"; fi

wait_job "$jid1" 240 COMPLETED FAILED CANCELLED TIMEOUT > /dev/null
log1=$TMP/logs/onenode_$jid1.out
grep -q "world 2 rank(s) on 1 node(s), 2 on this node" "$log1" && grep -q "resumed from .*step_0*$k.h5" "$log1" \
  && [ "$(job_field "$jid1" JobState)" = COMPLETED ] && ok "resumed at 1 node x 2 tasks from the step-$k checkpoint" \
  || { bad "resume at 1 node x 2 tasks ($(job_field "$jid1" JobState))"; tail -5 "$log1"; }
losses "$TMP/onenode/metrics.jsonl" > "$TMP/onenode.losses"
n1=$(wc -l < "$TMP/onenode.losses")
if [ "$n1" -gt 0 ] && [ "$n1" = $(( STEPS - ${k:-0} )) ] && diff <(awk -v k="${k:-0}" '$1 > k' "$TMP/ref.losses") "$TMP/onenode.losses" > /dev/null; then
  ok "steps $((k+1))-$STEPS at 1 node bitwise equal to the uninterrupted run"
else bad "1-node resume: $n1 steps, or losses differ"; fi

# 4. srun without PMIx: Open MPI aborts in MPI_Init; our note before it names the option.
srun --mpi=none -N 2 -n 2 "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" --print-config > "$TMP/nopmix.log" 2>&1
rc=$?
[ "$rc" != 0 ] && grep -q "needs \`srun --mpi=pmix\`" "$TMP/nopmix.log" \
  && ok "srun --mpi=none fails (exit $rc) naming --mpi=pmix" || { bad "srun --mpi=none: exit $rc"; tail -5 "$TMP/nopmix.log"; }

slurm_test_end
