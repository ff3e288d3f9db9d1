#!/usr/bin/env bash
# scripts/plot-run on bad input and bad outputs: a binary or corrupt metrics.jsonl, records
# that are JSON but not metrics records, -o into a missing directory, onto a directory, and into a
# read-only one (a tmpfs mounted read-only: root ignores permission bits; needs root, fails without):
# exit 2, one "plot-run:" line naming the file, no Python traceback, nothing on stdout, no PNG left.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../support/checks.sh"
SRC=${WMTP_SOURCE_DIR:?}; TMP=${WMTP_TEST_TMP_DIR:?}/plot_run_errors
ro=$TMP/readonly
cleanup() { umount "$ro" 2>/dev/null; }
trap cleanup EXIT
cleanup
rm -rf "$TMP"; mkdir -p "$TMP" "$ro"; cd "$TMP" || exit 1
plot="$SRC/scripts/plot-run"

# expect_refused NAME PATTERN ARGS...: exit 2, one stderr line matching PATTERN, no traceback, empty stdout
expect_refused() {
  local name=$1 pattern=$2; shift 2
  "$plot" "$@" > "$TMP/$name.out" 2> "$TMP/$name.err"; local rc=$?
  local lines; lines=$(wc -l < "$TMP/$name.err")
  if [ "$rc" = 2 ] && [ "$lines" = 1 ] && grep -q "^plot-run: .*$pattern" "$TMP/$name.err" \
     && ! grep -q Traceback "$TMP/$name.err" && [ ! -s "$TMP/$name.out" ]; then
    ok "$name: exit 2: $(cat "$TMP/$name.err")"
  else
    bad "$name: exit $rc, $lines stderr lines, $(wc -c < "$TMP/$name.out") bytes on stdout"; head -c 600 "$TMP/$name.err"
  fi
}

mkdir -p good binary corrupt notrecords
python3 - <<'PY'
import json, os
with open("good/metrics.jsonl", "w") as f:
    for s in range(1, 11):
        f.write(json.dumps({"step": s, "time": 1.7e9 + s, "train/loss": 2.0 / s, "train/learning_rate": 1e-3}) + "\n")
with open("binary/metrics.jsonl", "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + os.urandom(4096))
with open("corrupt/metrics.jsonl", "w") as f:
    f.write('{"step": 1, "time": 1.0, "train/loss": 2.0}\n')
    f.write('step 2 loss 1.5\n')
    f.write('{"step": 3, "time": 3.0, "train/loss": 1.0}\n')
with open("notrecords/metrics.jsonl", "w") as f:
    f.write('[1, 2, 3]\n')
PY
expect_refused binary "$TMP/binary/metrics.jsonl:1: not a metrics record" "$TMP/binary" -o "$TMP/b.png"
expect_refused corrupt "$TMP/corrupt/metrics.jsonl:2: not a metrics record" "$TMP/corrupt" -o "$TMP/c.png"
expect_refused not_records "$TMP/notrecords/metrics.jsonl:1: not a metrics record" "$TMP/notrecords" -o "$TMP/n.png"
expect_refused missing_dir "the directory '$TMP/nowhere' does not exist" good -o "$TMP/nowhere/x.png"
expect_refused onto_dir "a directory" good -o "$TMP/good"
if mount -t tmpfs -o size=1m,ro tmpfs "$ro"; then
  expect_refused readonly_dir "the directory '$ro' is not writable" good -o "$ro/x.png"
else
  bad "cannot mount a read-only tmpfs on $ro (this test needs root)"
fi
ls "$TMP"/*.png "$TMP"/*.tmp.png > /dev/null 2>&1 && bad "a PNG was left: $(ls "$TMP"/*.png)" || ok "no PNG left behind"
"$plot" good -o "$TMP/good.png" > /dev/null 2>&1 && [ -s "$TMP/good.png" ] && ok "a good run still plots" || bad "the good run"

checks_finish
