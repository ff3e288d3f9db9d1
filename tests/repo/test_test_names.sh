#!/usr/bin/env bash
# Every ctest of this build is named test_<what> in lower case (an MPI binary's ctests end in _npN),
# the convention tests/CMakeLists.txt states, so `ctest -R test_<area>` and the docs' names can be
# trusted. Fails listing the names that break it.
# Usage: test_test_names.sh [BUILD_DIR] (default: WMTP_BUILD_DIR, as ctest sets it).
set -euo pipefail
build=${1:-${WMTP_BUILD_DIR:?set by ctest: the build tree}}
names=$(cd "$build" && ctest -N | sed -n 's/^ *Test *#[0-9]*: //p')
total=$(grep -c . <<<"$names" || true)
[ "$total" -ge 20 ] || { echo "ctest -N in $build lists $total tests: not a configured wmtp build"; exit 1; }
wrong=$(grep -vE '^test_[a-z0-9_]+$' <<<"$names" || true)
if [ -n "$wrong" ]; then
  echo "ctest names not of the form test_<what> (lower case, digits, underscores):"
  echo "$wrong"
  exit 1
fi
echo "$total ctest names, all test_<what>"
