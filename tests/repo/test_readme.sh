#!/usr/bin/env bash
# What README.md says about the tree, checked against the tree, so it cannot drift: its "Layout" block
# names every area of src/ and no area that is not there, and every "<number> programs" in README.md,
# Makefile.hpc and docs/ is the number of programs apps/ builds (one per apps/*.cpp; tests/apps checks
# the table of programs row by row against the programs built).
# Usage: test_readme.sh [SOURCE_DIR] (default: WMTP_SOURCE_DIR, as ctest sets it).
set -euo pipefail
src=${1:-${WMTP_SOURCE_DIR:?set by ctest: the source tree}}
python3 - "$src" <<'PY'
import glob, os, re, sys

root = sys.argv[1]
readme = open(os.path.join(root, "README.md")).read()
if "\n## Layout" not in readme:
    sys.exit("README.md has no '## Layout' section")
section = readme.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"```\n(.*?)```", section, re.S)
if not blocks:
    sys.exit("README.md's Layout section has no code block listing the areas")
named = set(re.findall(r"(?<![\w/])src/([a-z_]+)", blocks[0]))
areas = {d for d in os.listdir(os.path.join(root, "src")) if os.path.isdir(os.path.join(root, "src", d))}
failures = []
for a in sorted(areas - named):
    failures.append(f"README.md's Layout does not name src/{a}")
for a in sorted(named - areas):
    failures.append(f"README.md's Layout names src/{a}, which does not exist")

words = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
programs = len(glob.glob(os.path.join(root, "apps", "*.cpp")))
files = [os.path.join(root, "README.md"), os.path.join(root, "Makefile.hpc")]
files += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
counted = 0
for path in files:
    if not os.path.exists(path):
        continue
    for i, line in enumerate(open(path, errors="replace"), 1):
        for m in re.finditer(r"\b(\d+|" + "|".join(words) + r")\s+programs\b", line, re.I):
            n = m.group(1).lower()
            n = int(n) if n.isdigit() else words.index(n)
            counted += 1
            if n != programs:
                failures.append(f"{os.path.relpath(path, root)}:{i}: says '{m.group(0)}', apps/ builds {programs}")
print(f"README.md's Layout: {len(named)} areas named, src/ has {len(areas)}; "
      f"{counted} program counts checked against the {programs} programs of apps/")
if failures:
    print("\n".join(failures))
    sys.exit(1)
PY
