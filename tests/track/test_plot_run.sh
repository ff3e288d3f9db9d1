#!/usr/bin/env bash
# scripts/plot-run on metrics.jsonl files written here (a baseline-like run resumed once, with a torn
# last line, and a critic-like run): the PNG has the layout of the panels those keys call for and
# pixels of each run's colour (the curves are drawn, overlaid); a missing run directory and a missing
# gnuplot are clear errors.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../support/checks.sh"
BIN=${WMTP_BIN_DIR:?}; SRC=${WMTP_SOURCE_DIR:?}; TMP=${WMTP_TEST_TMP_DIR:?}/plot_run
rm -rf "$TMP"; mkdir -p "$TMP"; cd "$TMP" || exit 1
python3 - <<'PY'
import json, math, os
os.makedirs("base", exist_ok=True); os.makedirs("critic", exist_ok=True)
with open("base/metrics.jsonl", "w") as f:
    for s in list(range(1, 31)) + list(range(21, 41)):  # resumed from step 20: steps 21-30 twice
        r = {"step": s, "time": 1.7e9 + s, "train/loss": 5 * math.exp(-s / 20), "train/grad_norm": 1 + (s % 3) / 3,
             "train/learning_rate": 1e-3 * min(1.0, s / 4), "perf/tokens_per_sec": 5000.0 + s, "perf/mfu_pct": None}
        for k in range(4):
            r[f"train/loss_head_{k}"] = r["train/loss"] + 0.3 * k
        f.write(json.dumps(r) + "\n")
        if s % 10 == 0:
            f.write(json.dumps({"step": s, "time": 1.7e9 + s, "val/loss": r["train/loss"] + 0.2}) + "\n")
    f.write('{"step": 41, "time": 1.7e9, "train/lo')  # the writer died mid-record
with open("critic/metrics.jsonl", "w") as f:
    for s in range(1, 41):
        f.write(json.dumps({"step": s, "time": 1.7e9 + s, "train/loss": 0.69 - s / 200, "train/grad_norm": 0.5,
                            "train/learning_rate": 1e-4, "perf/tokens_per_sec": 3000.0,
                            "train/pairwise_accuracy": 0.5 + s / 100}) + "\n")
PY
# png_check FILE WIDTH HEIGHT COLOUR:MIN...: the size, and at least MIN pixels of each colour. A legend
# sample alone is ~30 pixels, curves reduced to their first point gave 33-217 where the real ones
# give 110-1925: the minimums sit between.
png_check() {
  python3 - "$@" <<'PY'
import struct, sys, zlib
path, w_want, h_want, colours = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [c.split(":") for c in sys.argv[4:]]
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, ihdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    if kind == b"IDAT": idat += body
    pos += 12 + n
w, h, depth, ctype = ihdr[:4]
assert (w, h) == (w_want, h_want), f"{w}x{h}, expected {w_want}x{h_want}"
assert depth == 8 and ctype in (2, 6), (depth, ctype)
bpp = 3 if ctype == 2 else 4
raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
for y in range(h):  # PNG row filters (None, Sub, Up, Average, Paeth)
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(bytes(line)); prev = line
for col, least in colours:
    rgb = bytes.fromhex(col.lstrip("#"))
    n = sum(row[i:i + 3] == rgb for row in rows for i in range(0, stride, bpp))
    assert n >= int(least), f"only {n} pixels of {col} (at least {least}): curves not drawn"
    print(f"  {col}: {n} pixels")
PY
}
# One run: 5 panels (train loss, validation loss, lr, grad norm, tokens/s): 3 columns x 2 rows.
# Small panels (320x220) keep the test's pure-Python PNG decoding quick.
# The torn last record is skipped with one warning naming its line (stderr).
if "$SRC/scripts/plot-run" base --panel-size 320x220 > out1.txt 2> err1.txt && [ "$(cat out1.txt)" = base/curves.png ] \
   && [ "$(cat err1.txt)" = "plot-run: warning: base/metrics.jsonl:56: a torn record (its writer was killed or ran out of disk mid-line): skipped" ] \
   && png_check base/curves.png 960 440 "#1f77b4:1000" "#d62728:70" "#2ca02c:70"; then
  ok "one run: base/curves.png, 5 panels, curves drawn, one warning for the torn record"
else bad "one run"; cat out1.txt err1.txt; fi
# Two runs overlaid: + critic accuracy = 6 panels (3 x 2); run 1 blue, run 2 red.
if "$SRC/scripts/plot-run" base critic -o both.png --panel-size 320x220 > out2.txt 2>&1 && png_check both.png 960 440 "#1f77b4:700" "#d62728:500"; then
  ok "two runs overlaid: 6 panels, both runs' colours"
else bad "two runs"; cat out2.txt; fi
"$SRC/scripts/plot-run" nowhere > out3.txt 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q "no metrics.jsonl in 'nowhere'" out3.txt; then ok "missing run: exit 2 naming it"
else bad "missing run: exit $rc"; cat out3.txt; fi
PATH=/nonexistent /usr/bin/python3 "$SRC/scripts/plot-run" base -o x.png > out4.txt 2>&1; rc=$?
if [ "$rc" = 1 ] && grep -q "gnuplot not found" out4.txt && [ ! -e x.png ]; then ok "no gnuplot: exit 1 saying what to install"
else bad "no gnuplot: exit $rc"; cat out4.txt; fi
checks_finish
