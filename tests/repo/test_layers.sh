#!/usr/bin/env bash
# The layering of src/ as docs/architecture.md states it ("Layers"): every `#include "<area>/..."`
# in src/<area>/ and apps/ must be one the table allows. Fails listing FILE:LINE and the arrow.
# Usage: test_layers.sh [SOURCE_DIR] (default: WMTP_SOURCE_DIR, as ctest sets it).
set -euo pipefail
src=${1:-${WMTP_SOURCE_DIR:?set by ctest: the source tree}}
python3 - "$src" <<'PY'
import os, re, sys

root = sys.argv[1]
doc = open(os.path.join(root, "docs/architecture.md")).read()
section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
allowed = {}
for line in section.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 4 or not cells[0].isdigit():
        continue
    area = cells[1].strip("`").rstrip("/").replace("src/", "")
    deps = re.findall(r"`([a-z_]+)`", cells[3])
    allowed[area] = None if "every area" in cells[3] else set(deps)
areas = [a for a in allowed if a != "apps"]
missing = sorted(d for d in os.listdir(os.path.join(root, "src"))
                 if os.path.isdir(os.path.join(root, "src", d)) and d not in allowed)
if len(allowed) < 8 or missing:
    sys.exit(f"docs/architecture.md's layer table has {len(allowed)} rows; areas of src/ it lacks: {missing}")

bad, n = [], 0
for top, area_of in (("src", lambda rel: rel.split(os.sep)[1]), ("apps", lambda rel: "apps")):
    for d, _, names in os.walk(os.path.join(root, top)):
        for name in names:
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.join(d, name)
            rel = os.path.relpath(path, root)
            me = area_of(rel)
            for i, line in enumerate(open(path, errors="replace"), 1):
                m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
                if not m or m.group(1) not in areas or m.group(1) == me:
                    continue
                n += 1
                ok = allowed[me] is None or m.group(1) in allowed[me]
                if not ok:
                    bad.append(f"{rel}:{i}: {me} -> {m.group(1)} is not allowed (docs/architecture.md, Layers)")
print(f"{n} cross-area includes checked against {len(allowed)} areas")
if bad:
    print("\n".join(bad))
    sys.exit(1)
PY
