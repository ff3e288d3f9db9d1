#!/usr/bin/env bash
# TensorBoard event files and MLflow's file store written by a real tiny training run, read back by
# the tools' own readers ($WMTP_PYTHON: TensorBoard's EventAccumulator, MLflow's MlflowClient), and
# the event files' framing and fields by tb_reader.check_wire (what TensorBoard tolerates):
#  1. train-baseline (np 1, 8 steps, a record every step, validation every 4, MLflow file store) stops
#     itself after 5 steps (exit 75); its step-5 checkpoint is discarded so the resumed run recomputes
#     step 5 as after a kill -9; resumed, it finishes. TensorBoard: two event files; EventAccumulator
#     reads each tag's steps 1-5 of the first file then 5-8 of the second, and with TensorBoard's
#     preemption rule (a step written again replaces the earlier value, metrics.jsonl's rule too)
#     every metrics.jsonl scalar at its step bitwise as float32, nothing else; the config as text at
#     steps 0 and 4.
#  2. MLflow (MlflowClient on file://): status KILLED after the stop, then one run across the resume
#     (its id in mlflow.json), FINISHED; params = config.toml flattened; tags; every metrics.jsonl
#     point exactly once (the recomputed step 5 keeps its first value: MLflow metrics only append).
#  3. track-sync into a TensorBoard directory twice (the same single file), into the live store
#     (nothing sent) and into a new store twice (everything, then nothing).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../train/e2e_lib.sh"
e2e_setup track_e2e
export PYTHONDONTWRITEBYTECODE=1  # the readers are imported from the source tree: write nothing there
HERE="$SRC/tests/track"
PY=${WMTP_PYTHON:?set by ctest: the Python with the real peers (scripts/setup.sh)}
"$PY" -c 'import mlflow, tensorboard' || { echo "FAIL $PY cannot import mlflow and tensorboard (scripts/setup.sh installs them)"; exit 1; }
run_dir="$TMP/run"
common=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5"
        --set training.max_steps=8 --set checkpoint.every=2 --set checkpoint.keep_last=0 --set training.eval_every=4
        --set logging.log_interval=1 --set logging.peak_tflops=1.0 --set training.run_dir="$run_dir"
        --set checkpoint.dir="$run_dir/ckpt" --set logging.mlflow_uri="file://$TMP/mlruns")

# 1. stop after 5 steps, lose the step-5 checkpoint, resume
"$BIN/train-baseline" "${common[@]}" --set training.stop_after_steps=5 > "$TMP/first.log" 2>&1; rc=$?
[ "$rc" = 75 ] && ok "first invocation stopped itself after 5 steps (exit 75)" || { bad "first invocation: exit $rc"; tail -20 "$TMP/first.log"; }
cp "$run_dir/config.toml" "$TMP/first_config.toml"
rm -f "$run_dir/ckpt/step_00000005.h5"; echo step_00000004.h5 > "$run_dir/ckpt/latest"
"$PY" - "$HERE" "$TMP/mlruns" <<'PY' && ok "MLflow: run KILLED after the stop" || bad "MLflow status after the stop"
import sys; sys.path.insert(0, sys.argv[1]); import mlflow_reader as m
runs = m.client_state("file://" + sys.argv[2])["runs"]
assert len(runs) == 1, runs.keys()
info = next(iter(runs.values()))["info"]
assert info["status"] == "KILLED" and info["end_time"] >= info["start_time"] > 0, info
PY
"$BIN/train-baseline" "${common[@]}" > "$TMP/second.log" 2>&1; rc=$?
[ "$rc" = 0 ] && grep -q "resumed from .*step_00000004" "$TMP/second.log" && ok "resumed from step 4 and finished" \
  || { bad "second invocation: exit $rc"; tail -20 "$TMP/second.log"; }

"$PY" - "$HERE" "$run_dir" "$TMP/first_config.toml" <<'PY' && ok "TensorBoard (EventAccumulator): every scalar at its step across the resume, config text; CRCs, fields" || bad "TensorBoard"
import json, os, struct, sys; sys.path.insert(0, sys.argv[1]); import tb_reader as tb, metrics_jsonl
run, first_config = sys.argv[2], open(sys.argv[3]).read()
d = os.path.join(run, "tensorboard")
# What TensorBoard reads: per tag, every record of metrics.jsonl in the order written (step 5 of the
# first invocation, then again from the resumed one), bitwise as float32...
written = {}
for line in open(os.path.join(run, "metrics.jsonl")):
    r = json.loads(line)
    for k, v in r.items():
        if k not in ("step", "time") and v is not None:
            written.setdefault(k, []).append((r["step"], tb.f32(v)))
seen = tb.read(d)
assert set(seen["scalars"]) == set(written), sorted(set(seen["scalars"]) ^ set(written))
def first_difference(k):  # (TensorBoard's point, metrics.jsonl's) as (step, value)
    pts = lambda l: [(s, struct.unpack("<f", v)[0]) for s, v in l] + [None]
    return next((a, b) for a, b in zip(pts(seen["scalars"][k]), pts(written[k])) if a != b)
wrong = [k for k in written if seen["scalars"][k] != written[k]]
assert not wrong, f"{len(wrong)} tags differ, e.g. " + "; ".join(f"{k}: read {a}, written {b}" for k in wrong[:3] for a, b in [first_difference(k)])
# ...and what its UI shows after preemption: metrics.jsonl's last value of every step, nothing else.
got, want = tb.preempt(seen["scalars"]), metrics_jsonl.last(os.path.join(run, "metrics.jsonl"))
assert got == {k: tb.f32(v) for k, v in want.items()}, sorted(set(got) ^ set(want))[:5]
unindent = lambda md: "".join(l[4:] + "\n" for l in md.splitlines())
texts = seen["texts"]
assert [(s, t) for s, t, _ in texts] == [(0, "config"), (4, "config")], [(s, t) for s, t, _ in texts]
assert unindent(texts[0][2]) == first_config, "step-0 config text is not the first invocation's config.toml"
assert unindent(texts[1][2]) == open(os.path.join(run, "config.toml")).read(), "resume config text"
# The framing, CRCs and fields (what TensorBoard tolerates); one file per invocation, step 5 in both.
files = tb.check_wire(d)
assert len(files) == 2, [p for p, _ in files]
steps = [sorted({e["step"] for e in evs if e.get("values")}) for _, evs in files]
assert steps[0][-1] == 5 and steps[1][0] == 4 and 5 in steps[1], steps
raw = sum(len(v) for v in seen["scalars"].values())
print(f"  {len(want)} metrics.jsonl scalars at their steps in {len(files)} files ({raw} read, step 5 twice)")
PY

# 2. MLflow file store
"$PY" - "$HERE" "$TMP/mlruns" "$run_dir" "$TMP/first_config.toml" <<'PY' && ok "MLflow file store: layout, one run across the resume, params, tags, every point once" || bad "MLflow file store"
import json, os, socket, sys; sys.path.insert(0, sys.argv[1]); import mlflow_reader as m
root, run_dir, first_config = sys.argv[2], sys.argv[3], open(sys.argv[4]).read()
store = m.client_state("file://" + root)
exps = store["experiments"]
assert exps["0"]["name"] == "Default" and os.path.isdir(os.path.join(root, ".trash")), exps.get("0")
named = [e for e in exps.values() if e["name"] == "wmtp"]
assert len(named) == 1 and named[0]["lifecycle_stage"] == "active", exps
assert named[0]["artifact_location"] == "file://" + os.path.join(root, named[0]["experiment_id"])
assert len(store["runs"]) == 1, list(store["runs"])
rid, run = next(iter(store["runs"].items()))
info = run["info"]
rec = json.load(open(os.path.join(run_dir, "mlflow.json")))["runs"]
assert rec == [{"tracking_uri": "file://" + root, "experiment_id": named[0]["experiment_id"], "run_id": rid}], rec
assert info["run_id"] == rid and info["experiment_id"] == named[0]["experiment_id"], info
assert info["status"] == "FINISHED" and info["end_time"] >= info["start_time"] > 0 and info["lifecycle_stage"] == "active", info
assert info["run_name"] == "run", info
assert info["artifact_uri"] == "file://" + os.path.join(root, info["experiment_id"], rid, "artifacts")
t = run["tags"]
assert t["mlflow.runName"] == "run" and t["wmtp.program"] == "train-baseline" and t["wmtp.world_size"] == "1", t
assert t["wmtp.host"] == socket.gethostname() and t["wmtp.version"] and t["wmtp.run_dir"] == run_dir, t
assert t["wmtp.changed_param.training.stop_after_steps"] == "0 (from step 4)", t
n_params = m.check_params(run, first_config)
n = m.check_points(run, os.path.join(run_dir, "metrics.jsonl"), keep="first")
print(f"  run {rid}: {n} points, {n_params} params, {len(t)} tags")
PY

# 3. track-sync
sync() { "$BIN/track-sync" "$@" >> "$TMP/sync.log" 2>&1; }
sync "$run_dir" --tensorboard "$TMP/tbsync" && cp "$TMP/tbsync/run/"events.out.tfevents.* "$TMP/first_sync.bin" \
  && sync "$run_dir" --tensorboard "$TMP/tbsync" && [ "$(ls "$TMP/tbsync/run" | wc -l)" = 1 ] \
  && cmp -s "$TMP/first_sync.bin" "$TMP/tbsync/run/"events.out.tfevents.* \
  && "$PY" - "$HERE" "$TMP/tbsync/run" "$run_dir/metrics.jsonl" <<'PY' && ok "track-sync --tensorboard: one file, every point once, twice the same" || { bad "track-sync --tensorboard"; cat "$TMP/sync.log"; }
import sys; sys.path.insert(0, sys.argv[1]); import tb_reader as tb, metrics_jsonl
tb.check_wire(sys.argv[2])
want = {}
for (k, s), v in sorted(metrics_jsonl.last(sys.argv[3]).items()):
    want.setdefault(k, []).append((s, tb.f32(v)))
got = tb.read(sys.argv[2])["scalars"]
assert got == want, "not every point once, at its step, with metrics.jsonl's last value"
PY
sync "$run_dir" --mlflow "file://$TMP/mlruns" && grep -q "points, 0 sent" "$TMP/sync.log" \
  && ok "track-sync into the live store: nothing sent (the run holds every point)" || { bad "track-sync into the live store"; cat "$TMP/sync.log"; }
: > "$TMP/sync.log"
sync "$run_dir" --mlflow "file://$TMP/mlruns2" && sync "$run_dir" --mlflow "file://$TMP/mlruns2" \
  && [ "$(grep -c ' 0 sent' "$TMP/sync.log")" = 1 ] \
  && "$PY" - "$HERE" "$TMP/mlruns2" "$run_dir/metrics.jsonl" <<'PY' && ok "track-sync into a new store twice: every point once" || { bad "track-sync into a new store"; cat "$TMP/sync.log"; }
import sys; sys.path.insert(0, sys.argv[1]); import mlflow_reader as m
runs = m.client_state("file://" + sys.argv[2])["runs"]
assert len(runs) == 1, list(runs)
run = next(iter(runs.values()))
assert run["info"]["status"] == "FINISHED" and run["tags"]["wmtp.program"] == "train-baseline", run["info"]
assert "wmtp.host" not in run["tags"], "a sync does not know the training host"
m.check_points(run, sys.argv[3], keep="last")
PY
grep -E "sent|->" "$TMP/sync.log" | sed 's/^/  /'
e2e_finish
