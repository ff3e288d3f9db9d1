#!/usr/bin/env bash
# Every executable the project builds binds the C++ standard library to libstdc++, not to a copy
# another library exports (PyTorch's pip libtorch*.so export their own std::filesystem; a program
# bound to them crashed). For each executable in LIST (tests/CMakeLists.txt writes it: name, path,
# all|optional), two facts of the file, which decide how the dynamic linker binds:
#   1. libstdc++.so.6 is in its NEEDED list before every other library (sanitizer runtimes, which must
#      come first, excepted): the loader takes the first definition in that order;
#   2. every symbol it takes from libstdc++ carries a GLIBCXX_/CXXABI_ version: the link editor bound
#      it to libstdc++'s definition (a reference bound to an unversioned copy carries none). Symbols a
#      sanitizer runtime defines on purpose (operator new/delete under ASan) are its own.
# Executables built by `all` must exist (else the check could not run: FAIL); optional ones (benches)
# are checked when built.
#   check_link_order.sh LIST
set -u
list=${1:?usage: $0 EXECUTABLES_LIST}
source "$(dirname "${BASH_SOURCE[0]}")/../support/checks.sh"
[ -s "$list" ] || { bad "$list is missing or empty"; exit 1; }
command -v readelf >/dev/null && command -v nm >/dev/null || { bad "needs readelf and nm (binutils)"; exit 1; }
skipped=0 stdcxx=""
while IFS=$'\t' read -r name path kind; do
  [ -n "$name" ] || continue
  if [ ! -f "$path" ]; then
    if [ "$kind" = optional ]; then skipped=$((skipped + 1)); continue; fi
    bad "$name: $path is not built (build everything before this test)"; continue
  fi
  needed=$(readelf -d -W "$path" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  before=$(awk '/^libstdc\+\+\.so\.6$/ {exit} !/^lib(asan|ubsan|tsan|lsan|hwasan)\.so/ {print}' <<<"$needed")
  if ! grep -qx 'libstdc++.so.6' <<<"$needed"; then
    bad "$name: libstdc++.so.6 is not in its NEEDED list: $(tr '\n' ' ' <<<"$needed")"; continue
  fi
  if [ -n "$before" ]; then
    bad "$name: NEEDED lists $(tr '\n' ' ' <<<"$before")before libstdc++.so.6 (link wmtp_stdlib_first, src/CMakeLists.txt)"
    continue
  fi
  if [ -z "$stdcxx" ]; then
    stdcxx=$(ldd "$path" | awk '$1 == "libstdc++.so.6" {print $3}')
    [ -f "$stdcxx" ] || { bad "cannot find the libstdc++.so.6 $name loads"; exit 1; }
    defined=$(nm -D --defined-only "$stdcxx" | awk '{sub(/@.*/, "", $3); print $3}' | sort -u)
  fi
  own=""  # what its sanitizer runtimes define
  for san in $(grep -E '^lib(asan|ubsan|tsan|lsan|hwasan)\.so' <<<"$needed"); do
    own+=$(nm -D --defined-only "$(ldd "$path" | awk -v l="$san" '$1 == l {print $3}')" | awk '{sub(/@.*/, "", $3); print $3}')$'\n'
  done
  # undefined symbols of this executable that libstdc++ defines, with their version (or none)
  unversioned=$(nm -D --undefined-only "$path" | awk '{print $2}' |
    awk -v defs=<(echo "$defined") -v owns=<(echo "$own") 'BEGIN {while ((getline s < defs) > 0) d[s] = 1
                                                                  while ((getline s < owns) > 0) delete d[s]}
      {n = $0; v = ""; i = index(n, "@"); if (i) {v = substr(n, i); n = substr(n, 1, i - 1); sub(/^@+/, "", v)}
       if ((n in d) && v !~ /^(GLIBCXX|CXXABI)_/) print n (v == "" ? "" : "@" v)}')
  if [ -n "$unversioned" ]; then
    bad "$name: $(wc -l <<<"$unversioned") libstdc++ symbol(s) bound without a libstdc++ version, e.g. $(head -3 <<<"$unversioned" | tr '\n' ' ')"
    continue
  fi
  ok "$name"
done < "$list"
echo "libstdc++.so.6 first and every libstdc++ symbol versioned: $passes executable(s); $skipped optional not built"
[ "$passes" -gt 0 ] || bad "no executable checked"
checks_finish
