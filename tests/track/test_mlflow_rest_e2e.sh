#!/usr/bin/env bash
# MLflow's REST API from real tiny training runs, against a real `mlflow server` ($WMTP_PYTHON -m mlflow,
# on 127.0.0.1, SQLite store in the test's directory) read back through MLflow's own client, and
# against fake_mlflow_server.py for the failures a real server cannot be made to produce (the
# documented endpoints, limits and error codes; partial writes before a 503, 429s, stalls):
#  1. a flaky server (503 after writing half of every 3rd batch, 429 on every 5th request): a run
#     stopped after 3 steps (exit 75) and resumed to 6: one MLflow run, every metrics.jsonl point
#     exactly once and in step order, params = the config flattened, status FINISHED.
#  2. the server down (nothing listening), refusing (403 to everything) and answering after 30 s:
#     a 20-step run logging every step finishes with exit 0 and the step times of a run without
#     MLflow (printed side by side); one warning when delivery fails and one summary, no more. The
#     only bound asserted is a generous one on the whole run (a 30 s stall per record would be 600 s).
#  3. track-sync: the run that never reached its server, into a working one twice (everything, then
#     nothing); the run of 1 (nothing: it holds every point).
#  4. the real server (started at the beginning, stopped by the EXIT trap): a run stopped after 3
#     steps and resumed to 6, and track-sync of the offline run twice (everything, then nothing).
#     Read back through MlflowClient: the live run is one MLflow run, FINISHED, params = the config,
#     its tags; both runs hold every metrics.jsonl point once with its value, step and time.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../train/e2e_lib.sh"
e2e_setup mlflow_rest_e2e
export PYTHONDONTWRITEBYTECODE=1  # the readers are imported from the source tree: write nothing there
HERE="$SRC/tests/track"
PY=${WMTP_PYTHON:?set by ctest: the Python with the real peers (scripts/setup.sh)}
"$PY" -c 'import mlflow' || { echo "FAIL $PY cannot import mlflow (scripts/setup.sh installs it)"; exit 1; }
servers=() real_pid=""
stop_mlflow() {  # the real server's whole session (setsid: its uvicorn worker with it), 10 s to end, then -9
  [ -n "$real_pid" ] || return 0
  kill -- -"$real_pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 -- -"$real_pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 -- -"$real_pid" 2>/dev/null
}
trap 'for p in "${servers[@]}"; do kill "$p" 2>/dev/null; done; stop_mlflow' EXIT
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_mlflow() {  # a real MLflow tracking server, booting in the background: sets REAL, real_pid
  local port; port=$(free_port); mkdir -p "$TMP/mlflow"
  MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$PY" -m mlflow server --host 127.0.0.1 --port "$port" --workers 1 \
    --backend-store-uri "sqlite:///$TMP/mlflow/mlflow.db" --default-artifact-root "$TMP/mlflow/artifacts" \
    > "$TMP/mlflow/server.log" 2>&1 &
  real_pid=$! REAL="http://127.0.0.1:$port"
}
wait_mlflow() {  # until /health answers (120 s at most; at once if the server died)
  "$PY" - "$REAL" "$real_pid" <<'PY'
import os, sys, time, urllib.request
deadline = time.time() + 120
while time.time() < deadline:
    try:
        urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)
        sys.exit(0)
    except Exception:
        try:
            os.kill(int(sys.argv[2]), 0)
        except OSError:
            sys.exit(1)
        time.sleep(0.2)
sys.exit(1)
PY
}
start_server() {  # start_server MODE: sets URL
  rm -f "$TMP/port.$1"
  "$PY" "$HERE/fake_mlflow_server.py" --mode "$1" --port-file "$TMP/port.$1" > "$TMP/server.$1.log" 2>&1 &
  servers+=($!)
  for _ in $(seq 1 100); do [ -s "$TMP/port.$1" ] && break; sleep 0.1; done
  URL="http://127.0.0.1:$(cat "$TMP/port.$1")"
}
train() {  # train NAME URI [extra...]: a tiny run (one 4-sequence micro-batch a step) at np 1 in $TMP/NAME
  local name=$1 uri=$2; shift 2
  "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="" \
    --set training.global_batch_size=4 --set logging.log_interval=1 --set logging.peak_tflops=1.0 \
    --set checkpoint.keep_last=0 --set training.run_dir="$TMP/$name" --set checkpoint.dir="$TMP/$name/ckpt" \
    --set logging.mlflow_uri="$uri" --set logging.mlflow_timeout_sec=2 "$@" > "$TMP/$name.log" 2>&1
}

start_mlflow  # boots while the stand-in's cases run (section 4)

# 1. flaky server, stop + resume
start_server flaky; FLAKY=$URL
flaky=(--set training.max_steps=6 --set checkpoint.every=3 --set logging.mlflow_timeout_sec=30)  # time to end cleanly
train live "$FLAKY" "${flaky[@]}" --set training.stop_after_steps=3; rc1=$?
cp "$TMP/live/config.toml" "$TMP/first_config.toml"
train live "$FLAKY" "${flaky[@]}"; rc2=$?
[ "$rc1" = 75 ] && [ "$rc2" = 0 ] && ok "stopped after 3 steps (75), resumed to 6 (0)" || { bad "exits $rc1 $rc2"; tail "$TMP/live.log"; }
"$PY" - "$HERE" "$FLAKY" "$TMP/live" "$TMP/first_config.toml" <<'PY' && ok "flaky server: one run, every point once in order, params, FINISHED" || bad "flaky server"
import json, os, sys; sys.path.insert(0, sys.argv[1]); import mlflow_reader as m
url, run_dir = sys.argv[2], sys.argv[3]
st = m.server_state(url)
runs = list(st["runs"].items())
assert len(runs) == 1, [r for r, _ in runs]
rid, run = runs[0]
assert st["experiments"][run["experiment"]]["name"] == "wmtp"
assert json.load(open(os.path.join(run_dir, "mlflow.json")))["runs"][0]["run_id"] == rid
assert run["info"]["status"] == "FINISHED" and run["info"]["run_name"] == "live", run["info"]
assert run["tags"]["wmtp.program"] == "train-baseline" and run["tags"]["mlflow.runName"] == "live"
m.check_params(run, open(sys.argv[4]).read())
n = m.check_points(run, os.path.join(run_dir, "metrics.jsonl"), keep="first")
errors = [s for _, _, s in st["log"] if s != 200]
assert 503 in errors and 429 in errors, f"the server never failed: {errors}"
print(f"  {n} points, each once, through {errors.count(503)} partial 503s and {errors.count(429)} 429s")
PY

# 2. down, refusing, slow: the run neither waits nor fails
down="http://127.0.0.1:$(free_port)"
start_server refuse; REFUSE=$URL
start_server slow; SLOW=$URL
printf '  %-9s %5s %9s %14s\n' server exit "wall (s)" "step time (s)"
for mode in none down refuse slow; do
  case $mode in none) uri="";; down) uri=$down;; refuse) uri=$REFUSE;; slow) uri=$SLOW;; esac
  t0=$(date +%s.%N)
  train "$mode" "$uri" --set training.max_steps=20 --set checkpoint.every=0; rc=$?
  wall=$("$PY" -c "print(round($(date +%s.%N) - $t0, 1))")
  step=$("$PY" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; v=[x['perf/step_time_sec'] for x in r if x['step']>1]; print(f'{sum(v)/len(v):.3f}')" "$TMP/$mode/metrics.jsonl" 2>/dev/null)
  printf '  %-9s %5s %9s %14s\n' "$mode" "$rc" "$wall" "${step:-?}"
  eval "wall_$mode=$wall rc_$mode=$rc"
done
for mode in down refuse slow; do
  eval "rc=\$rc_$mode wall=\$wall_$mode"
  warnings=$(grep -c "warning: MLflow" "$TMP/$mode.log")
  if [ "$rc" = 0 ] && "$PY" -c "import sys; sys.exit(0 if $wall < $wall_none + 60 else 1)" && [ "$warnings" -ge 1 ] && [ "$warnings" -le 2 ] \
     && [ "$(grep -c '"step": *20\b\|"step":20,' "$TMP/$mode/metrics.jsonl")" -ge 1 ]; then
    ok "server $mode: 20 steps, exit 0, $warnings MLflow warning line(s)"
  else bad "server $mode: exit $rc, wall $wall s (without MLflow $wall_none s), $warnings warnings"; grep -i mlflow "$TMP/$mode.log"; fi
done

# 3. track-sync
start_server normal; GOOD=$URL
"$BIN/train-baseline" -c "$SRC/configs/tiny.toml" --set logging.mlflow_uri=ftp://host/x --dry-run > "$TMP/badcfg.log" 2>&1; rc=$?
"$BIN/track-sync" "$TMP/live" > "$TMP/badsync.log" 2>&1; rc2=$?
[ "$rc" = 2 ] && grep -q "\[logging\] mlflow_uri = 'ftp://host/x': unsupported scheme" "$TMP/badcfg.log" \
  && [ "$rc2" = 2 ] && grep -q "give --mlflow URI and/or --tensorboard DIR" "$TMP/badsync.log" \
  && ok "a bad mlflow_uri and a track-sync with nothing to do are exit 2, saying why" || { bad "usage errors: exit $rc, $rc2"; cat "$TMP/badcfg.log" "$TMP/badsync.log"; }
"$BIN/track-sync" "$TMP/down" --mlflow "$GOOD" > "$TMP/sync1.log" 2>&1 && "$BIN/track-sync" "$TMP/down" --mlflow "$GOOD" > "$TMP/sync2.log" 2>&1 \
  && ! grep -q " 0 sent" "$TMP/sync1.log" && grep -q " 0 sent" "$TMP/sync2.log" \
  && "$PY" - "$HERE" "$GOOD" "$TMP/down/metrics.jsonl" <<'PY' && ok "track-sync of the offline run, twice: every point once" || { bad "track-sync of the offline run"; cat "$TMP/sync1.log" "$TMP/sync2.log"; }
import sys; sys.path.insert(0, sys.argv[1]); import mlflow_reader as m
runs = list(m.server_state(sys.argv[2])["runs"].values())
assert len(runs) == 1 and runs[0]["info"]["status"] == "FINISHED", [r["info"] for r in runs]
print(f"  {m.check_points(runs[0], sys.argv[3], keep='last')} points")
PY
"$BIN/track-sync" "$TMP/live" --mlflow "$FLAKY" > "$TMP/sync3.log" 2>&1 && grep -q " 0 sent" "$TMP/sync3.log" \
  && ok "track-sync of the live-logged run: nothing sent" || { bad "track-sync of the live-logged run"; cat "$TMP/sync3.log"; }
# 4. the real MLflow server
if wait_mlflow; then
  ok "real MLflow server up (mlflow $("$PY" -c 'import importlib.metadata as m; print(m.version("mlflow"))'), $REAL)"
  real=(--set training.max_steps=6 --set checkpoint.every=3 --set logging.mlflow_timeout_sec=30)
  train real "$REAL" "${real[@]}" --set training.stop_after_steps=3; rc1=$?
  cp "$TMP/real/config.toml" "$TMP/real_first_config.toml"
  train real "$REAL" "${real[@]}"; rc2=$?
  [ "$rc1" = 75 ] && [ "$rc2" = 0 ] && ok "real server: stopped after 3 steps (75), resumed to 6 (0)" || { bad "real server: exits $rc1 $rc2"; tail "$TMP/real.log"; }
  "$BIN/track-sync" "$TMP/down" --mlflow "$REAL" > "$TMP/sync4.log" 2>&1 && "$BIN/track-sync" "$TMP/down" --mlflow "$REAL" > "$TMP/sync5.log" 2>&1 \
    && ! grep -q " 0 sent" "$TMP/sync4.log" && grep -q " 0 sent" "$TMP/sync5.log" \
    && ok "real server: track-sync of the offline run twice (everything, then nothing)" || { bad "real server: track-sync"; cat "$TMP/sync4.log" "$TMP/sync5.log"; }
  "$PY" - "$HERE" "$REAL" "$TMP/real" "$TMP/real_first_config.toml" "$TMP/down" <<'PY' && ok "real server (MlflowClient): the live run FINISHED, params, tags; every point of both runs once with its step, value and time" || bad "real server"
import json, os, socket, sys; sys.path.insert(0, sys.argv[1]); import mlflow_reader as m
url, run_dir, synced_dir = sys.argv[2], sys.argv[3], sys.argv[5]
st = m.client_state(url)
named = [e for e in st["experiments"].values() if e["name"] == "wmtp"]
assert len(named) == 1 and named[0]["lifecycle_stage"] == "active", st["experiments"]
ids = {}
for d in (run_dir, synced_dir):
    rec = [r for r in json.load(open(os.path.join(d, "mlflow.json")))["runs"] if r["tracking_uri"] == url]
    assert len(rec) == 1 and rec[0]["experiment_id"] == named[0]["experiment_id"], rec
    ids[d] = rec[0]["run_id"]
assert sorted(st["runs"]) == sorted(ids.values()), (list(st["runs"]), ids)
run = st["runs"][ids[run_dir]]
info = run["info"]
assert info["status"] == "FINISHED" and info["run_name"] == "real" and info["end_time"] >= info["start_time"] > 0, info
t = run["tags"]
assert t["mlflow.runName"] == "real" and t["wmtp.program"] == "train-baseline" and t["wmtp.run_dir"] == run_dir, t
assert t["wmtp.host"] == socket.gethostname() and t["wmtp.changed_param.training.stop_after_steps"] == "0 (from step 3)", t
n_params = m.check_params(run, open(sys.argv[4]).read())
n = m.check_points(run, os.path.join(run_dir, "metrics.jsonl"), keep="first")
synced = st["runs"][ids[synced_dir]]
assert synced["info"]["status"] == "FINISHED" and synced["info"]["run_name"] == "down", synced["info"]
n_synced = m.check_points(synced, os.path.join(synced_dir, "metrics.jsonl"), keep="last")
print(f"  live run: {n} points, {n_params} params, {len(t)} tags; synced run: {n_synced} points")
PY
else
  bad "the real MLflow server did not answer $REAL/health within 120 s"; tail -20 "$TMP/mlflow/server.log"
fi
e2e_finish
