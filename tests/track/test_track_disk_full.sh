#!/usr/bin/env bash
# Tracking on a full disk, on a small tmpfs as tests/ckpt/test_disk_full.sh does (root:
# `mount -t tmpfs`; fails, never skips, without it). A file fills the tmpfs up to FREE pages.
#  1. metrics.jsonl (run_dir on the tmpfs; checkpoints elsewhere), np 1 and np 2 under a timeout:
#     the run ends with exit 1 and one message naming metrics.jsonl and the full disk (the agreed
#     failure of a checkpoint that does not fit); metrics.jsonl ends with its last complete record.
#     Space back, the run resumes and finishes; its metrics.jsonl, plus a torn record a kill -9 left
#     before the resume, is read by track-sync and plot-run (one warning naming the line each).
#  2. MLflow's file store on the tmpfs (the run directory elsewhere), space back during training:
#     the live run retries and delivers everything (never "params cannot change"), FINISHED.
#  3. the same, space back only after training: training exits 0 leaving the MLflow run RUNNING
#     with nothing torn in it (no empty param, every metric line whole); track-sync then uploads the
#     rest, writes the missing params and ends the run (FINISHED, end_time = the last record's time).
#  In 2 and 3: params = config.toml flattened, every metrics.jsonl point exactly once, read by
#  MLflow's own MlflowClient ($WMTP_PYTHON, tests/track/mlflow_reader.py).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../train/e2e_lib.sh"
e2e_setup track_disk_full
export PYTHONDONTWRITEBYTECODE=1
HERE="$SRC/tests/track"
PY=${WMTP_PYTHON:?set by ctest: the Python with the real peers (scripts/setup.sh)}
mnt=$TMP/mnt
cleanup() { umount "$mnt" 2>/dev/null; }
trap cleanup EXIT
# fill_tmpfs FREE_PAGES: a fresh 4 MB tmpfs on $mnt with only FREE_PAGES pages left
fill_tmpfs() {
  cleanup
  mkdir -p "$mnt"
  mount -t tmpfs -o size=4m tmpfs "$mnt" || { bad "cannot mount a tmpfs on $mnt (this test needs root)"; e2e_finish; exit 1; }
  local avail; avail=$(df -B4096 --output=avail "$mnt" | tail -1)
  head -c $(( (avail - $1) * 4096 )) /dev/zero > "$mnt/filler"
}
train() {  # train NAME NP RUN_DIR [args]: tiny run, one record per step, checkpoints in $TMP/NAME.ckpt
  local name=$1 np=$2 run_dir=$3; shift 3
  timeout -k 5 300 "$MPI" -np "$np" "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" \
    --set data.valid= --set training.global_batch_size=4 --set logging.log_interval=1 --set logging.peak_tflops=1.0 \
    --set checkpoint.keep_last=0 --set training.run_dir="$run_dir" --set checkpoint.dir="$TMP/$name.ckpt" \
    --set logging.tensorboard=false "$@" >> "$TMP/$name.log" 2>&1
}
all_records() {  # all_records FILE: every line a JSON record, the file ends with a newline
  python3 - "$1" <<'PY'
import json, sys
data = open(sys.argv[1], "rb").read()
assert data.endswith(b"\n"), "does not end with a newline: " + repr(data[-80:])
steps = [json.loads(l)["step"] for l in data.decode().splitlines()]
print(f"  {len(steps)} records, steps {min(steps)}..{max(steps)}")
PY
}

# 1. metrics.jsonl on a full disk
for np in 1 2; do
  name=metrics_np$np
  batch=(--set training.global_batch_size=$((4 * np)) --set training.max_steps=40 --set checkpoint.every=5)
  fill_tmpfs 6
  train "$name" "$np" "$mnt/run" "${batch[@]}"; rc=$?
  n_err=$(grep -c "error:" "$TMP/$name.log")
  if [ "$rc" = 1 ] && [ "$n_err" = 1 ] && grep "error:" "$TMP/$name.log" | grep -q "metrics.jsonl': No space left on device"; then
    ok "np $np: metrics.jsonl on a full disk: exit 1, one message: $(grep -o "error:.*device" "$TMP/$name.log" | head -c 160)"
  else bad "np $np: metrics.jsonl on a full disk: exit $rc, $n_err error lines"; tail -8 "$TMP/$name.log"; fi
  out=$(all_records "$mnt/run/metrics.jsonl") && ok "np $np: metrics.jsonl ends with its last complete record:$out" \
    || bad "np $np: metrics.jsonl after the failure: $out"
  rm -f "$mnt/filler"  # space again
  printf '{"step": 99, "time": 1.0, "train/lo' >> "$mnt/run/metrics.jsonl"  # as a kill -9 mid-write leaves it
  train "$name" "$np" "$mnt/run" "${batch[@]}"; rc=$?
  steps=$(python3 -c "
import json, sys
seen = set()
for l in open(sys.argv[1]):
    try: seen.add(json.loads(l)['step'])
    except ValueError: pass
print(len(seen), max(seen))" "$mnt/run/metrics.jsonl")
  [ "$rc" = 0 ] && [ "$steps" = "40 40" ] && ok "np $np: space back: resumed and finished (steps 1..40 recorded)" \
    || { bad "np $np: resume after the full disk: exit $rc, steps $steps"; tail -5 "$TMP/$name.log"; }
done
torn_line=$(grep -n '"train/lo$' "$mnt/run/metrics.jsonl" | cut -d: -f1)
"$BIN/track-sync" "$mnt/run" --tensorboard "$TMP/tb" > "$TMP/sync_torn.log" 2>&1; rc=$?
[ "$rc" = 0 ] && [ "$(grep -c "warn.*metrics.jsonl:$torn_line: a torn record" "$TMP/sync_torn.log")" = 1 ] \
  && ok "track-sync skips the torn record with one warning (line $torn_line)" || { bad "track-sync on a torn record: exit $rc"; cat "$TMP/sync_torn.log"; }
"$SRC/scripts/plot-run" "$mnt/run" -o "$TMP/torn.png" > "$TMP/plot_torn.log" 2>&1; rc=$?
[ "$rc" = 0 ] && [ "$(grep -c "warning: .*metrics.jsonl:$torn_line: a torn record" "$TMP/plot_torn.log")" = 1 ] \
  && ok "plot-run skips it with one warning" || { bad "plot-run on a torn record: exit $rc"; cat "$TMP/plot_torn.log"; }

# 2 and 3. MLflow's file store on a full disk
check_store() {  # check_store NAME: one run, FINISHED with an end time, params, every point once
  "$PY" - "$HERE" "$mnt/mlruns" "$TMP/$1" <<'PY'
import os, sys; sys.path.insert(0, sys.argv[1]); import mlflow_reader as m, metrics_jsonl
root, run_dir = sys.argv[2], sys.argv[3]
runs = m.client_state("file://" + root)["runs"]
assert len(runs) == 1, list(runs)
run = next(iter(runs.values()))
info = run["info"]
assert info["status"] == "FINISHED" and isinstance(info["end_time"], int) and info["end_time"] >= info["start_time"], info
jsonl = os.path.join(run_dir, "metrics.jsonl")
last_time = max(t for v in metrics_jsonl.points(jsonl).values() for _, t in v)
n_params = m.check_params(run, open(os.path.join(run_dir, "config.toml")).read())
n_points = m.check_points(run, jsonl, keep="first")
print(f"  {n_params} params, {n_points} points, end_time {info['end_time']} (last record {round(last_time * 1000)})")
PY
}
free_pages=(30 120)  # 30: the disk fills among the params; 120: among the metric files
for free in "${free_pages[@]}"; do
  # 2. space back during training
  name=store_live_$free
  fill_tmpfs "$free"
  train "$name" 1 "$TMP/$name" --set training.max_steps=200 --set checkpoint.every=0 \
    --set logging.mlflow_uri="file://$mnt/mlruns" --set logging.mlflow_timeout_sec=60 &
  pid=$!
  for _ in $(seq 1 600); do grep -q "retrying in the background" "$TMP/$name.log" && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  grep -q "retrying in the background" "$TMP/$name.log" || bad "$free pages: the store never filled"
  rm -f "$mnt/filler"
  wait $pid; rc=$?
  if [ "$rc" = 0 ] && grep -q "MLflow.*delivering again" "$TMP/$name.log" && ! grep -q "cannot change\|dropped\|not delivered" "$TMP/$name.log"; then
    ok "$free pages free, space back during training: exit 0, delivering again, nothing dropped"
  else bad "$free pages, space back during training: exit $rc"; grep -i "mlflow" "$TMP/$name.log" | head; fi
  out=$(check_store "$name") && ok "$free pages: the live run is whole:$out" || bad "$free pages: live run: $out"
  rm -rf "${mnt:?}/mlruns"

  # 3. space back after training; track-sync ends the run
  name=store_sync_$free
  fill_tmpfs "$free"
  train "$name" 1 "$TMP/$name" --set training.max_steps=20 --set checkpoint.every=0 \
    --set logging.mlflow_uri="file://$mnt/mlruns" --set logging.mlflow_timeout_sec=2; rc=$?
  "$PY" - "$HERE" "$mnt/mlruns" "$TMP/$name" <<'PY' && torn=ok || torn=torn
import os, sys, tomllib; sys.path.insert(0, sys.argv[1]); import mlflow_reader as m
flat = dict(m._flat(tomllib.loads(open(os.path.join(sys.argv[3], "config.toml")).read())))
for base, _, names in os.walk(sys.argv[2]):  # every metric line whole: "<timestamp> <value> <step>\n"
    if os.sep + "metrics" in base:
        for n in names:
            text = open(os.path.join(base, n)).read()
            assert text.endswith("\n") and all(len(l.split(" ")) == 3 for l in text.splitlines()), (n, text[-80:])
for run in m.client_state("file://" + sys.argv[2])["runs"].values():
    assert run["info"]["status"] == "RUNNING" and run["info"]["end_time"] is None, run["info"]
    for k, text in run["params"].items():
        ok = text == flat[k] if isinstance(flat[k], str) else text != ""  # "" is a value only for a string
        assert ok, f"param {k} = {text!r}"
PY
  [ "$rc" = 0 ] && [ $torn = ok ] && ! grep -q "cannot change" "$TMP/$name.log" \
    && ok "$free pages, disk still full at the end: exit 0, the MLflow run RUNNING, nothing torn in it" \
    || { bad "$free pages, full to the end: exit $rc, store $torn"; grep -i "mlflow" "$TMP/$name.log" | head; }
  rm -f "$mnt/filler"
  "$BIN/track-sync" "$TMP/$name" --mlflow "file://$mnt/mlruns" > "$TMP/$name.sync.log" 2>&1; rc=$?
  [ "$rc" = 0 ] && grep -q "its training had ended: run marked FINISHED" "$TMP/$name.sync.log" \
    && ok "$free pages: track-sync uploads the rest and ends the run" || { bad "$free pages: track-sync: exit $rc"; cat "$TMP/$name.sync.log"; }
  out=$(check_store "$name") && ok "$free pages: after track-sync the run is whole:$out" || bad "$free pages: after track-sync: $out"
  rm -rf "${mnt:?}/mlruns"
done

e2e_finish
