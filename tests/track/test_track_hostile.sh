#!/usr/bin/env bash
# Tracking against hostile servers, damaged records and secrets, from real tiny training runs:
#  1. a server answering every request with an endless body (Content-Length 1e11): the run finishes
#     (exit 0) with one warning saying the answer was too large; each connection was dropped after
#     at most the 16 MiB cap plus socket buffers (the server counts what it could send).
#  2. mlflow_timeout_sec = 1e9 is refused (exit 2 naming the key).
#  3. a server that answers after 30 s and mlflow_timeout_sec = 60: SIGUSR1 during the end-of-run
#     wait (np 2, to mpirun, as scripts/launch.sh sends it) and SIGTERM during training (np 1) end
#     the wait at once, saying how many
#     points were not delivered; only a generous bound guards against the 60 s wait.
#  4. a corrupt <run_dir>/mlflow.json: the resumed training and bin/track-sync (exit 2) name the
#     file and say to move it aside; moved aside, track-sync starts a new MLflow run.
#  5. credentials: a URI with user:password is refused (exit 2, by training and by track-sync),
#     pointing to MLFLOW_TRACKING_USERNAME/PASSWORD/TOKEN; those variables reach the server (Basic
#     and Bearer); no file the runs write and no console line holds the secret.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../train/e2e_lib.sh"
e2e_setup track_hostile
export PYTHONDONTWRITEBYTECODE=1
HERE="$SRC/tests/track"
SECRET=S3cr3tPW-wmtp
servers=()
trap 'for p in "${servers[@]}"; do kill "$p" 2>/dev/null; done' EXIT
start_server() {  # start_server SCRIPT MODE [args]: sets URL
  local script=$1 mode=$2; shift 2
  rm -f "$TMP/port.$mode"
  python3 "$HERE/$script" --mode "$mode" --port-file "$TMP/port.$mode" "$@" > "$TMP/server.$mode.log" 2>&1 &
  servers+=($!)
  for _ in $(seq 1 100); do [ -s "$TMP/port.$mode" ] && break; sleep 0.1; done
  URL="http://127.0.0.1:$(cat "$TMP/port.$mode")"
}
common() {  # common NAME: the arguments of a tiny np-1 run in $TMP/NAME, one record per step
  echo -c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid= \
    --set training.global_batch_size=4 --set logging.log_interval=1 --set logging.peak_tflops=1.0 \
    --set checkpoint.keep_last=0 --set training.run_dir="$TMP/$1" --set checkpoint.dir="$TMP/$1/ckpt"
}

# 1. an endless answer
start_server hostile_mlflow_server.py flood --flood-mib 256
# shellcheck disable=SC2046
"$BIN/train-baseline" $(common flood) --set training.max_steps=4 --set checkpoint.every=0 \
  --set logging.mlflow_uri="$URL" --set logging.mlflow_timeout_sec=5 > "$TMP/flood.log" 2>&1; rc=$?
n_warn=$(grep -c "larger than 16 MiB" "$TMP/flood.log")
[ "$rc" = 0 ] && [ "$n_warn" = 1 ] && ok "endless answers: exit 0, one warning" \
  || { bad "endless answers: exit $rc, $n_warn warnings"; grep -i "mlflow" "$TMP/flood.log"; }
python3 - "$URL" <<'PY' && ok "endless answers: every connection dropped near the cap" || bad "endless answers read on"
import json, sys, urllib.request
sent = json.load(urllib.request.urlopen(sys.argv[1] + "/wmtp-test/log"))["sent"]
assert sent and max(sent) < 48 << 20, [s >> 20 for s in sent]
print(f"  {len(sent)} answers, at most {max(sent) >> 20} MiB taken of 256")
PY

# 2. an absurd timeout
# shellcheck disable=SC2046
timeout -k 5 60 "$BIN/train-baseline" $(common absurd) --set training.max_steps=2 --set logging.mlflow_uri="$URL" \
  --set logging.mlflow_timeout_sec=1e9 > "$TMP/absurd.log" 2>&1; rc=$?  # accepted, it would wait for ever
[ "$rc" = 2 ] && grep -q "\[logging\] mlflow_timeout_sec = 1e+09: expected seconds in (0, 300\]" "$TMP/absurd.log" \
  && ok "mlflow_timeout_sec = 1e9 refused (exit 2, the key named)" || { bad "1e9: exit $rc"; cat "$TMP/absurd.log"; }

# 3. SIGTERM during the end-of-run wait (np 2) and during training (np 1), a server answering after 30 s
start_server fake_mlflow_server.py slow
wait_for() {  # wait_for FILE PATTERN PID: until the pattern is in the file (or the process is gone)
  for _ in $(seq 1 1200); do grep -qs "$2" "$1" && return 0; kill -0 "$3" 2>/dev/null || return 1; sleep 0.1; done
  return 1
}
# shellcheck disable=SC2046
timeout -k 5 50 "$MPI" -np 2 "$BIN/train-baseline" $(common endwait) --set training.global_batch_size=8 --set training.max_steps=4 \
  --set checkpoint.every=0 --set logging.mlflow_uri="$URL" --set logging.mlflow_timeout_sec=60 \
  > "$TMP/endwait.log" 2>&1 &
pid=$!
# SIGUSR1 to mpirun, which passes it on to the ranks (what scripts/launch.sh turns SIGTERM into)
if wait_for "$TMP/endwait.log" "done:" $pid; then sleep 0.5; kill -USR1 "$(pgrep -P $pid)"; fi  # mpirun, under timeout
wait $pid; rc=$?
if [ "$rc" != 124 ] && [ "$rc" != 137 ] && grep -q "points not delivered.*a stop signal ended the wait" "$TMP/endwait.log"; then
  ok "np 2: a stop signal in the end-of-run wait ends it (exit $rc): $(grep -o '[0-9]* of [0-9]* points not delivered' "$TMP/endwait.log")"
else bad "np 2: a stop signal in the end-of-run wait (exit $rc)"; tail -5 "$TMP/endwait.log"; fi
# shellcheck disable=SC2046
timeout -k 5 50 "$BIN/train-baseline" $(common midrun) --set training.max_steps=400 --set checkpoint.every=0 \
  --set logging.mlflow_uri="$URL" --set logging.mlflow_timeout_sec=60 > "$TMP/midrun.log" 2>&1 &
pid=$!
if wait_for "$TMP/midrun.log" "step 3/400" $pid; then kill -TERM $pid; fi
wait $pid; rc=$?
if [ "$rc" = 75 ] && grep -q "points not delivered.*a stop signal ended the wait" "$TMP/midrun.log"; then
  ok "np 1: SIGTERM during training: checkpoint, exit 75, no wait: $(grep -o '[0-9]* of [0-9]* points not delivered' "$TMP/midrun.log")"
else bad "np 1: SIGTERM during training (exit $rc)"; tail -5 "$TMP/midrun.log"; fi

# 4. a corrupt mlflow.json
store="file://$TMP/mlruns"
# shellcheck disable=SC2046
"$BIN/train-baseline" $(common corrupt) --set training.max_steps=4 --set checkpoint.every=2 \
  --set logging.mlflow_uri="$store" --set training.stop_after_steps=2 > "$TMP/corrupt1.log" 2>&1; rc1=$?
record="$TMP/corrupt/mlflow.json"
printf '{"runs": [{"tracking_uri": "%s", "run_id": 12' "$store" > "$record"
# shellcheck disable=SC2046
"$BIN/train-baseline" $(common corrupt) --set training.max_steps=4 --set checkpoint.every=2 \
  --set logging.mlflow_uri="$store" > "$TMP/corrupt2.log" 2>&1; rc2=$?
want="the MLflow run record '$record' is corrupt (.*): move it aside (mv $record $record.bad) to start a new MLflow run"
n=$(grep -c "$want" "$TMP/corrupt2.log")
[ "$rc1" = 75 ] && [ "$rc2" = 0 ] && [ "$n" = 1 ] && ok "corrupt mlflow.json: training names it once, with the way out" \
  || { bad "corrupt mlflow.json in training: exit $rc1/$rc2, named $n times"; grep -i mlflow "$TMP/corrupt2.log"; }
"$BIN/track-sync" "$TMP/corrupt" --mlflow "$store" > "$TMP/corrupt_sync.log" 2>&1; rc=$?
[ "$rc" = 2 ] && grep -q "$want" "$TMP/corrupt_sync.log" && ok "corrupt mlflow.json: track-sync exit 2 naming it" \
  || { bad "corrupt mlflow.json: track-sync exit $rc"; cat "$TMP/corrupt_sync.log"; }
mv "$record" "$record.bad"
"$BIN/track-sync" "$TMP/corrupt" --mlflow "$store" > "$TMP/corrupt_sync2.log" 2>&1; rc=$?
[ "$rc" = 0 ] && grep -q "points, [1-9][0-9]* sent" "$TMP/corrupt_sync2.log" && ok "moved aside: track-sync starts a new MLflow run" \
  || { bad "moved aside: track-sync exit $rc"; cat "$TMP/corrupt_sync2.log"; }

# 5. credentials
start_server hostile_mlflow_server.py auth
host=${URL#http://}
# shellcheck disable=SC2046
"$BIN/train-baseline" $(common userinfo) --set training.max_steps=2 \
  --set logging.mlflow_uri="http://alice:$SECRET@$host/" > "$TMP/userinfo.log" 2>&1; rc=$?
[ "$rc" = 2 ] && grep -q "MLFLOW_TRACKING_USERNAME" "$TMP/userinfo.log" && grep -q "MLFLOW_TRACKING_TOKEN" "$TMP/userinfo.log" \
  && ok "a URI with credentials is refused (exit 2), pointing to the environment variables" \
  || { bad "credentials in the URI: exit $rc"; cat "$TMP/userinfo.log"; }
"$BIN/track-sync" "$TMP/corrupt" --mlflow "http://alice:$SECRET@$host" > "$TMP/userinfo_sync.log" 2>&1; rc=$?
[ "$rc" = 2 ] && grep -q "MLFLOW_TRACKING_PASSWORD" "$TMP/userinfo_sync.log" && ok "track-sync refuses them too (exit 2)" \
  || { bad "track-sync with credentials: exit $rc"; cat "$TMP/userinfo_sync.log"; }
# shellcheck disable=SC2046
MLFLOW_TRACKING_USERNAME=alice MLFLOW_TRACKING_PASSWORD=$SECRET "$BIN/train-baseline" $(common basic) \
  --set training.max_steps=3 --set checkpoint.every=3 --set logging.mlflow_uri="$URL" > "$TMP/basic.log" 2>&1; rc1=$?
MLFLOW_TRACKING_TOKEN=tok-$SECRET "$BIN/track-sync" "$TMP/basic" --mlflow "$URL" --experiment other \
  > "$TMP/token.log" 2>&1; rc2=$?
python3 - "$URL" "$SECRET" <<'PY' && [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && ok "MLFLOW_TRACKING_USERNAME/PASSWORD and _TOKEN reach the server" \
  || bad "the environment's credentials (exit $rc1/$rc2)"
import base64, json, sys, urllib.request
auth = json.load(urllib.request.urlopen(sys.argv[1] + "/wmtp-test/log"))["auth"]
basic = "Basic " + base64.b64encode(f"alice:{sys.argv[2]}".encode()).decode()
bearer = "Bearer tok-" + sys.argv[2]
assert auth and set(auth) == {basic, bearer}, set(auth)
print(f"  {auth.count(basic)} requests with Basic, {auth.count(bearer)} with Bearer")
PY
# Everything this test's runs wrote (run directories, checkpoints, TensorBoard, MLflow store, logs).
leaks=$(grep -rlaF "$SECRET" "$TMP" --exclude='server.*.log')
[ -z "$leaks" ] && ok "no file written and no console line holds the secret ($(find "$TMP" -type f | wc -l) files)" \
  || bad "the secret is in: $leaks"

e2e_finish
