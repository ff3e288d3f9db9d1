#!/usr/bin/env bash
# A clone of wmtp must stand on its own: no file in it may send a reader to a document or a path it
# does not have — the design notes, the re-implemented system's write-up or the GPU kit that sat
# beside the checkout while wmtp was written. Fails listing every FILE:LINE that does. Also: a
# section sign (§) must follow the in-repository .md file it points into ("docs/x.md §2"), since a
# bare "§4.3" points into some document the reader cannot open.
# Usage: test_self_contained.sh [SOURCE_DIR] (default: WMTP_SOURCE_DIR, as ctest sets it).
set -euo pipefail
src=${1:-${WMTP_SOURCE_DIR:?set by ctest: the source tree}}
python3 - "$src" <<'PY'
import os, re, subprocess, sys

root = sys.argv[1]
this = "tests/repo/test_self_contained.sh"
try:
    files = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split("\n")
except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked archive): every file
    files = [os.path.relpath(os.path.join(d, f), root) for d, subdirs, names in os.walk(root)
             for f in names if not any(p in ("build", ".git", "bin", "runs") for p in os.path.relpath(d, root).split(os.sep))]
files = [f for f in files if f and f != this]
tracked = set(files)
if len(files) < 50:
    sys.exit(f"found only {len(files)} files under {root}: not the wmtp source tree")

# Written so that this file does not match itself (it is skipped anyway).
forbidden = [
    (r"\bDESIGN\b", "the design notes are not in the repository"),
    (r"\.\./shared\b", "a path outside the checkout"),
    (r"weighted_mtp\.md|reference/weighted", "the original's write-up is not in the repository"),
    (r"hpc-conventions|style-anchors", "a reference document that is not in the repository"),
    (r"\bseeds/", "notes that are not in the repository"),
]
forbidden = [(re.compile(p), why) for p, why in forbidden]

bad = []
for f in files:
    path = os.path.join(root, f)
    if not os.path.isfile(path) or os.path.islink(path):
        continue
    try:
        text = open(path, encoding="utf-8").read()
    except (UnicodeDecodeError, OSError):
        continue  # binary
    for n, line in enumerate(text.split("\n"), 1):
        for rx, why in forbidden:
            if rx.search(line):
                bad.append(f"{f}:{n}: {why}: {line.strip()[:160]}")
        for m in re.finditer("§", line):
            doc = re.search(r"([\w./-]+\.md)\W*$", line[:m.start()].rstrip())
            if not doc or doc.group(1) not in tracked:
                bad.append(f"{f}:{n}: '§' not after an .md file of this repository: {line.strip()[:160]}")
for b in bad:
    print(b)
print(f"{len(files)} files read, {len(bad)} reference(s) to what a clone does not have")
sys.exit(1 if bad else 0)
PY
