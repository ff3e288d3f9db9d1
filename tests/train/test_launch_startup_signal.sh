#!/usr/bin/env bash
# SIGTERM to scripts/launch.sh in the first moments after the ranks exist (np 2, train-baseline on the
# tiny model): 0, 0.1, 0.2 and 0.3 s after mpirun's children appear — while they are still loading
# their libraries, before main — the job still ends with exit 75 ("resume me") and the ranks' stop
# message, never 138 ("exited on signal 10": a rank killed by the SIGUSR1 launch.sh turns it into).
# Every run is killed after $LIMIT s, so a hang fails the test.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_setup launch_startup_signal
LIMIT=${WMTP_TEST_RUN_LIMIT_S:-120}
common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid=""
        --set training.max_steps=100000 --set checkpoint.every=0 --set logging.log_interval=10 --set logging.peak_tflops=1.0)

for delay in 0 0.1 0.2 0.3; do
  name=d$delay
  MPIRUN="$MPI" "$SRC/scripts/launch.sh" -np 2 "$BIN/train-baseline" "${common[@]}" \
    --set checkpoint.dir="$TMP/$name/ckpt" --set training.run_dir="$TMP/$name" > "$TMP/$name.log" 2>&1 &
  launcher=$!
  ranks=""
  for _ in $(seq 1 $((LIMIT * 100))); do  # launch.sh -> mpirun -> the ranks
    mpirun_pid=$(pgrep -P "$launcher" | head -1)
    [ -n "$mpirun_pid" ] && ranks=$(pgrep -P "$mpirun_pid")
    [ -n "$ranks" ] && break
    kill -0 "$launcher" 2> /dev/null || break
    sleep 0.01
  done
  [ -n "$ranks" ] || bad "$name: the ranks never appeared"
  sleep "$delay"
  kill -TERM "$launcher"
  deadline=$(( $(date +%s) + LIMIT ))
  while kill -0 "$launcher" 2> /dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.2; done
  if kill -0 "$launcher" 2> /dev/null; then  # hung: a second SIGTERM aborts mpirun, then kill the rest
    kill -TERM "$launcher"; sleep 5; pkill -KILL -P "$mpirun_pid"; kill -KILL "$mpirun_pid" "$launcher" 2> /dev/null
  fi
  wait "$launcher"; rc=$?
  if [ "$rc" = 75 ] && grep -q "stopped by a signal" "$TMP/$name.log" && ! grep -q "exited on signal\|MPI_ABORT" "$TMP/$name.log"; then
    ok "SIGTERM ${delay} s after the ranks appeared: exit 75: $(grep -o 'stopped by a signal[^;]*' "$TMP/$name.log" | head -1)"
  else bad "SIGTERM ${delay} s after the ranks appeared: exit $rc (want 75)"; grep -v USDT "$TMP/$name.log" | tail -4; fi
done
e2e_finish
