#!/usr/bin/env bash
# LibTorch spellings that build against Debian's 1.13 (CI) but not against the PyTorch 2.x wheels real
# users build with: CI cannot compile against 2.x, so this scans the C++ sources of src/, apps/,
# tests/ and bench/ for them and fails naming each file:line and the spelling that works on both.
#   check_torch2_spellings.sh SOURCE_DIR
# The list holds what a 2.x build actually broke on (docs/gpu.md, "Building against a CUDA LibTorch");
# add a line when another one turns up.
set -u
src=${1:?usage: $0 SOURCE_DIR}
# spelling (extended regex of the name after "at::") | what to write instead
spellings=(
  "NoGradGuard|c10::NoGradGuard from <c10/core/GradMode.h> (2.x no longer reaches at::NoGradGuard through <ATen/ATen.h>)"
  "AutoGradMode|c10::AutoGradMode from <c10/core/GradMode.h> (2.x no longer reaches at::AutoGradMode through <ATen/ATen.h>)"
)
dirs=()
for d in src apps tests bench; do [ -d "$src/$d" ] && dirs+=("$src/$d"); done
files=$(find "${dirs[@]}" -type f \( -name '*.cpp' -o -name '*.cc' -o -name '*.h' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) | wc -l)
if [ "${#dirs[@]}" -lt 4 ] || [ "$files" -lt 50 ]; then
  echo "FAIL: found ${#dirs[@]} of src/ apps/ tests/ bench/ and $files C++ files under '$src': not a wmtp checkout"
  exit 1
fi
found=0
for entry in "${spellings[@]}"; do
  name=${entry%%|*} instead=${entry#*|}
  # at::NAME as a whole token (also ::at::NAME), not c10::NAME or at::NAMEFoo
  hits=$(grep -rnE --include='*.cpp' --include='*.cc' --include='*.h' --include='*.hpp' --include='*.cu' \
           --include='*.cuh' "(^|[^[:alnum:]_])at::($name)([^[:alnum:]_]|$)" "${dirs[@]}")
  [ -z "$hits" ] && continue
  while IFS= read -r h; do
    echo "${h#"$src"/}"
    echo "    at::$name does not build against LibTorch 2.x: use $instead"
    found=$((found + 1))
  done <<<"$hits"
done
echo "$files C++ files scanned; $found use(s) of spellings missing from LibTorch 2.x"
[ "$found" = 0 ]
