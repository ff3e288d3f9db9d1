#!/usr/bin/env bash
# ctest fixture: preprocess the bundled tiny corpus into BUILD/data/tiny/{train,valid}.h5 (one process).
# Usage: make_tiny_datasets.sh BIN_DIR TOKENIZER_MODEL OUT_DIR
set -euo pipefail
bin="$1"; model="$2"; out="$3"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
for split in train valid; do
  "$bin/preprocess-metadata" --input "$src/data/tiny/$split.jsonl" --tokenizer "$model" \
    --output "$out/$split.h5" >/dev/null
done
echo "tiny datasets in $out"
