#!/usr/bin/env bash
# make demo: the main job end to end on the bundled tiny corpus, at 2 ranks.
#   tokenizer -> preprocess-metadata (np 2) -> train-baseline with LoRA (np 2): stops itself halfway
#   (checkpoint, exit 75) and resumes -> merge-lora -> convert-checkpoint export to safetensors.
# Everything lands under build/tiny and runs/tiny. Run from the repository root (make demo does).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${WMTP_BIN_DIR:-bin}
OUT=build/tiny
RUN=runs/tiny
MPIRUN="mpirun --oversubscribe -np 2"
[ "$(id -u)" -eq 0 ] && MPIRUN="mpirun --oversubscribe --allow-run-as-root -np 2"
export OMP_NUM_THREADS=1
start=$(date +%s)
step() { printf '\n== %s\n' "$*"; }

rm -rf "$RUN"
mkdir -p "$OUT"
step "tokenizer: SentencePiece BPE trained on data/tiny/tokenizer.txt"
data/make_tokenizer.sh "$OUT/tokenizer"

step "preprocess-metadata at 2 ranks: data/tiny/{train,valid}.jsonl -> $OUT/{train,valid}.h5"
for split in train valid; do
  $MPIRUN "$BIN/preprocess-metadata" --input "data/tiny/$split.jsonl" --tokenizer "$OUT/tokenizer.model" \
    --output "$OUT/$split.h5" --max-length 256
done

step "train-baseline (tiny MTP model, LoRA) at 2 ranks: first 20 of 40 steps, then stop like a preempted job"
set +e
$MPIRUN "$BIN/train-baseline" -c configs/tiny.toml --set training.stop_after_steps=20
rc=$?
set -e
[ "$rc" -eq 75 ] || { echo "demo: expected exit 75 (checkpointed, resume me), got $rc" >&2; exit 1; }

step "train-baseline again: resumes from the newest checkpoint and finishes"
$MPIRUN "$BIN/train-baseline" -c configs/tiny.toml

final=$(ls "$RUN"/checkpoints/step_*.h5 | sort | tail -1)
step "merge-lora: fold the adapters of $final into the base weights"
"$BIN/merge-lora" --base "$final" --output "$RUN/merged.h5"   # the checkpoint holds base + adapters

step "convert-checkpoint export: $RUN/merged.h5 -> safetensors (HF names, bf16); adapters -> PEFT"
"$BIN/convert-checkpoint" export --input "$RUN/merged.h5" --output "$RUN/export" --names hf --dtype bf16
"$BIN/convert-checkpoint" export --input "$final" --output "$RUN/peft" --format peft

python3 - "$RUN/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train/loss"' in l]
print(f"\nloss: {rows[0]['train/loss']:.4f} at step {rows[0]['step']} -> {rows[-1]['train/loss']:.4f} at step {rows[-1]['step']}")
PY
cat <<MSG
outputs:
  datasets        $OUT/train.h5 $OUT/valid.h5
  checkpoints     $RUN/checkpoints/  (latest: $(cat $RUN/checkpoints/latest))
  metrics         $RUN/metrics.jsonl
  merged model    $RUN/merged.h5
  safetensors     $RUN/export/   (HF names; MTP extra heads in a sidecar file)
  PEFT adapters   $RUN/peft/
demo finished in $(( $(date +%s) - start )) s
MSG
