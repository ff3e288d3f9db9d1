#!/usr/bin/env bash
# Train the tiny SentencePiece test tokenizer (BPE, LLaMA-like settings: byte fallback, split digits,
# identity normalization, unk=0 bos=1 eos=2, no pad) from data/tiny/tokenizer.txt.
# Usage: data/make_tokenizer.sh OUT_PREFIX   -> OUT_PREFIX.model and OUT_PREFIX.vocab
# Idempotent: does nothing when OUT_PREFIX.model is newer than the text and this script. Nothing
# binary is committed; the tests' build runs this (tests/data/CMakeLists.txt).
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_PREFIX   (writes OUT_PREFIX.model, OUT_PREFIX.vocab)" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
text="$here/tiny/tokenizer.txt"
prefix="$1"
model="$prefix.model"
if [ -f "$model" ] && [ "$model" -nt "$text" ] && [ "$model" -nt "${BASH_SOURCE[0]}" ]; then
  exit 0
fi
command -v spm_train >/dev/null || { echo "$0: spm_train not found (apt-get install sentencepiece)" >&2; exit 1; }
mkdir -p "$(dirname "$prefix")"
# Train under a temporary prefix, then rename: a reader never sees a half-written model.
tmp="$prefix.tmp"
trap 'rm -f "$tmp.model" "$tmp.vocab"' EXIT
spm_train --input="$text" --model_prefix="$tmp" --model_type=bpe --vocab_size=512 \
  --self_test_sample_size=0 --input_format=text --character_coverage=1.0 \
  --split_digits=true --allow_whitespace_only_pieces=true --byte_fallback=true \
  --unk_surface=' ⁇ ' --normalization_rule_name=identity --remove_extra_whitespaces=false \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --num_threads=1 --minloglevel=2 >/dev/null 2>&1 || {
  echo "$0: spm_train failed; rerun without output redirection to see why" >&2; exit 1; }
mv -f "$tmp.vocab" "$prefix.vocab"
mv -f "$tmp.model" "$model"
