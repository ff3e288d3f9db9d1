#!/usr/bin/env bash
# A stop signal during start-up under sbatch/train.sbatch (real Slurm, 2 tasks on 2 nodes through
# srun): the job is requeued like after any exit 75, and its restart trains to the end.
#  - train-baseline's start-up is held after its datasets open (test-only WMTP_TEST_HOLD_STARTUP,
#    exported to the job; a 7B start-up spends minutes there); once the hold is logged, USR1 goes to
#    the batch script as the time limit sends it (scancel --signal=USR1 --batch);
#  - the first start ends with "stopped by a signal during start-up", no checkpoint, exit 75; the
#    script requeues; the restart (whose hold ends after its 20 s, no signal) trains every step from
#    step 1 and exits 0: the job COMPLETED after one requeue.
set -u
source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_begin slurm_startup_signal "$0" "$@"

DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
common=(--set data.train="$DATA/train.h5" --set data.valid="" --set training.max_steps=4 --set checkpoint.every=0
        --set logging.log_interval=1 --set logging.peak_tflops=1.0 --set checkpoint.dir="$TMP/job/ckpt"
        --set training.run_dir="$TMP/job")
jid=$(WMTP_TEST_HOLD_STARTUP="datasets 20" WMTP_BIN=$BIN PROGRAM=train-baseline CONFIG="$SRC/configs/tiny.toml" \
      sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0 --time=30 \
      --job-name=startup "$SRC/sbatch/train.sbatch" "${common[@]}")
jid=${jid%%;*}
log=$TMP/logs/startup_$jid.out
[ -n "$jid" ] && ok "submitted job $jid" || bad "sbatch failed"

signalled=0
for _ in $(seq 1 1800); do
  if grep -q "start-up held after 'datasets'" "$log" 2>/dev/null; then
    scancel --signal=USR1 --batch "$jid" && signalled=1
    break
  fi
  sleep 0.1
done
[ "$signalled" = 1 ] && ok "USR1 to the batch script during the start-up" || bad "the start-up never reached the hold"

wait_job "$jid" 300 COMPLETED FAILED CANCELLED TIMEOUT > /dev/null
state=$(job_field "$jid" JobState); restarts=$(job_field "$jid" Restarts)
echo "--- job log"; grep -v '"step"' "$log" | tail -30; echo "---"
[ "$state" = COMPLETED ] && [ "$restarts" = 1 ] && ok "job COMPLETED after 1 requeue" || bad "job $state, restarts $restarts"
grep -q "stopped by a signal during start-up (after 'datasets'): no checkpoint written; exit 75" "$log" \
  && grep -q "exited 75" "$log" && grep -q "requeueing (restart 1" "$log" \
  && ok "first start: stopped during start-up, exit 75, requeued" || bad "no start-up stop, 75 and requeue in the log"
grep -q "resumed from" "$log" && bad "the restart resumed a checkpoint the stop should not have written" \
  || ok "no checkpoint from the stopped start"
n=$(losses "$TMP/job/metrics.jsonl" | wc -l)
grep -q "exited 0 " "$log" && [ "$n" = 4 ] && ok "the restart trained steps 1-4 and exited 0" || bad "restart: $n steps"

slurm_test_end
