#!/usr/bin/env bash
# extract_walk.sh DOC OUT: every fenced block of DOC opened with "```cpp PATH" written to OUT/PATH,
# verbatim (docs/adding-a-pipeline.md's walk, built by tests/apps/CMakeLists.txt). Fails when DOC
# holds no such block or a block is not closed.
set -eu
doc=$1 out=$2 file= n=0
mkdir -p "$out"
while IFS= read -r line || [ -n "$line" ]; do
  if [ -z "$file" ]; then
    if [[ $line =~ ^\`\`\`cpp\ ([A-Za-z0-9_./-]+)$ ]]; then
      file=$out/${BASH_REMATCH[1]}; n=$((n + 1))
      mkdir -p "$(dirname "$file")"; : > "$file"
    fi
  elif [ "$line" = '```' ]; then
    file=
  else
    printf '%s\n' "$line" >> "$file"
  fi
done < "$doc"
[ -z "$file" ] || { echo "extract_walk: $doc: a \`\`\`cpp block is not closed" >&2; exit 1; }
[ "$n" -gt 0 ] || { echo "extract_walk: $doc: no \`\`\`cpp PATH block" >&2; exit 1; }
