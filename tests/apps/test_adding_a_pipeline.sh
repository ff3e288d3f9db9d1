#!/usr/bin/env bash
# docs/adding-a-pipeline.md is true: its code (train-decay, extracted and built by
# tests/apps/CMakeLists.txt exactly as the page shows it) trains two steps at np 2 on the tiny data
# with the page's command, reports its own metric, and its [decay] section is a config section like
# any other (--print-config, a refused value names the key).
set -u
source "$WMTP_SOURCE_DIR/tests/train/e2e_lib.sh"
e2e_setup adding_a_pipeline
PROG=${WMTP_WALK_BIN:?}/train-decay
[ -x "$PROG" ] || { bad "train-decay was not built from docs/adding-a-pipeline.md ($PROG)"; e2e_finish; exit 1; }

if "$PROG" --help 2>&1 | grep -q "train-decay"; then ok "--help"; else bad "--help"; fi
if "$PROG" --print-config 2>&1 | grep -qE '^gamma = 0\.5'; then ok "[decay] gamma in --print-config"
else bad "[decay] gamma in --print-config"; "$PROG" --print-config 2>&1 | tail -5; fi
out=$("$PROG" -c "$SRC/configs/tiny.toml" --set decay.gamma=0 2>&1); rc=$?
if [ "$rc" = 2 ] && grep -q "\[decay\] gamma must be in (0, 1\], got 0" <<<"$out"; then ok "check() refuses gamma = 0 (exit 2)"
else bad "gamma = 0: exit $rc"; echo "$out" | tail -5; fi

# The page's command, on the test's data and directories.
if $MPI -np 2 "$PROG" -c "$SRC/configs/tiny.toml" --set decay.gamma=0.7 --set training.max_steps=2 \
    --set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5" --set logging.log_interval=1 \
    --set checkpoint.dir="$TMP/run/ckpt" --set training.run_dir="$TMP/run" > "$TMP/run.log" 2>&1; then
  ok "two steps at np 2"
else
  bad "two steps at np 2"; tail -20 "$TMP/run.log"
fi
# weight/mean = sum_k 0.7^k n_k / sum_k n_k over the 4 heads: strictly between 0.7^3 and 1.
python3 - "$TMP/run/metrics.jsonl" <<'PY' && ok "metrics: train/loss and weight/mean at steps 1, 2" || bad "metrics.jsonl"
import json, math, sys
train = [r for r in map(json.loads, open(sys.argv[1])) if "train/loss" in r]
assert [r["step"] for r in train] == [1, 2], [r["step"] for r in train]
for r in train:
    assert math.isfinite(r["train/loss"]), r
    assert 0.7 ** 3 < r["weight/mean"] < 1.0, r["weight/mean"]
print("weight/mean", [round(r["weight/mean"], 4) for r in train])
PY
e2e_finish
