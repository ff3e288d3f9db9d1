#!/usr/bin/env bash
# Checks that the C++ sources (src/, apps/, bench/, tests/: *.cpp, *.h) are as clang-format 14 lays
# them out under .clang-format. Exits 0 when they all are; otherwise lists the files that differ and
# exits 1 (`clang-format -i FILE` fixes one). Without clang-format 14 it fails too, saying so:
# another major version lays some constructs out otherwise (scripts/setup.sh --test installs it).
# Usage: scripts/check-format.sh [FILE...]   (default: every tracked source of the four folders)
# CLANG_FORMAT: the binary (default: clang-format-14 when installed, else clang-format).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
cf=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [ -z "$cf" ]; then
  echo "check-format: clang-format not found (scripts/setup.sh --test installs it)"
  exit 1
fi
version=$("$cf" --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+')
if [ "$version" != 14 ]; then
  echo "check-format: $cf is clang-format ${version:-?}, the style is defined by clang-format 14"
  exit 1
fi
if [ $# -gt 0 ]; then
  files=("$@")
elif [ -e .git ]; then
  mapfile -t files < <(git ls-files -- 'src/*.cpp' 'src/*.h' 'apps/*.cpp' 'apps/*.h' 'bench/*.cpp' 'bench/*.h' \
                                       'tests/*.cpp' 'tests/*.h')
else
  mapfile -t files < <(find src apps bench tests -name '*.cpp' -o -name '*.h' | sort)
fi
[ ${#files[@]} -gt 0 ] || { echo "check-format: no source files found under $root"; exit 1; }
# clang-format --dry-run over 64 files per process, as many processes as cores (one process per file
# spent most of its time starting): it names each file whose layout differs, once per place.
report=$(printf '%s\0' "${files[@]}" | xargs -0 -n 64 -P "$(nproc)" "$cf" --style=file --dry-run -Werror 2>&1)
status=$?
differ=$(grep -oE '^[^:]+:[0-9]+:[0-9]+: error: code should be clang-formatted' <<<"$report" | cut -d: -f1 | sort -u)
if [ "$status" -ne 0 ] && [ -z "$differ" ]; then  # it failed otherwise: a file it cannot read, say
  echo "check-format: $cf failed:"
  head -20 <<<"$report"
  exit 1
fi
if [ -n "$differ" ]; then
  echo "check-format: $(grep -c . <<<"$differ") of ${#files[@]} files differ from clang-format $version's layout:"
  echo "$differ"
  echo "(clang-format -i FILE... rewrites them; see .clang-format)"
  exit 1
fi
echo "check-format: all ${#files[@]} files as clang-format $version lays them out"
