#!/usr/bin/env bash
# The bench model of bench-generate-throughput: configs/tiny_full.toml's model (dim 64, 4 heads of one
# block each) with a deeper trunk — TRUNK blocks (default 28) to one block per head, the shape of
# Meta's 7B MTP model (28 trunk blocks to one), where a speculative forward costs little more than a
# plain one — trained at 2 ranks until its heads draft at least MIN_TPF (3) tokens per forward,
# greedy, on TASKS (default the held-out tasks, data/tiny/tasks_mbpp.jsonl: prompts no training sample
# has; the script prints the seen tasks' figure too): a first run of FIRST steps from scratch, then
# runs of MORE steps from the last one's weights (at half the learning rate, as make demo's stage 6),
# at most ROUNDS of them. Writes runs/bench-generate/model.h5 (what the bench reads by default) and
# prints the tokens per forward after each run. Run again, it goes on from the last finished run
# (remove OUT to start over).
#
# The corpus is the bundled one and PROBLEMS (2000) more problems of its families
# (data/make_tiny_corpus.py --problems; none with a held-out prompt), tokenized with the bundled
# tokenizer: on the bundled 113 training pairs alone the model learns those answers by heart and
# drafts 2.0-2.8 tokens per forward on the held-out prompts (300-600 steps); with the larger corpus
# 2.90 after 800 steps and 3.02 after 1000 (validation loss 0.49, 0.41; ~750 s on 2 cores).
#
# Run in the checkout root after `make build-torch2` and `make bench` (train-baseline, convert-checkpoint
# and the bench in build-torch2/):  bash bench/train-generate-model.sh
# Environment: BIN (build-torch2/bin), BENCH (build-torch2/bench/bench-generate-throughput), DATA
# (build/tiny: the bundled tokenizer.model as make demo's stage 1 makes it; made here when missing),
# OUT (runs/bench-generate; the corpus in OUT/corpus), PROBLEMS (2000), TRUNK (28), FIRST (800),
# MORE (200), ROUNDS (5), MIN_TPF (3), TASKS (data/tiny/tasks_mbpp.jsonl), LR (1e-2: the first
# run's; later runs at half).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build-torch2/bin}
BENCH=${BENCH:-build-torch2/bench/bench-generate-throughput}
DATA=${DATA:-build/tiny}
OUT=${OUT:-runs/bench-generate}
PROBLEMS=${PROBLEMS:-2000} TRUNK=${TRUNK:-28} FIRST=${FIRST:-800} MORE=${MORE:-200} ROUNDS=${ROUNDS:-5} MIN_TPF=${MIN_TPF:-3}
TASKS=${TASKS:-data/tiny/tasks_mbpp.jsonl} LR=${LR:-1e-2}
MPIRUN="mpirun --oversubscribe -np 2"
[ "$(id -u)" -eq 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
export OMP_NUM_THREADS=1

[ -f "$DATA/tokenizer.model" ] || data/make_tokenizer.sh "$DATA/tokenizer"
CORPUS=$OUT/corpus
mkdir -p "$CORPUS"
if [ ! -f "$CORPUS/train.h5" ] || [ ! -f "$CORPUS/valid.h5" ]; then
  python3 data/make_tiny_corpus.py --problems "$PROBLEMS" "$CORPUS"
  for split in train valid; do
    $MPIRUN "$BIN/preprocess-metadata" --input "$CORPUS/$split.jsonl" --tokenizer "$DATA/tokenizer.model" \
      --output "$CORPUS/$split.h5.tmp" --max-length 256 > "$CORPUS/$split.log" 2>&1 ||
      { tail -20 "$CORPUS/$split.log"; echo "train-generate-model: preprocessing $split failed" >&2; exit 1; }
    mv "$CORPUS/$split.h5.tmp" "$CORPUS/$split.h5"
  done
fi
# train NAME STEPS LR [--set ...]: one run of configs/tiny_full.toml's model with the deeper trunk
train() {
  local name=$1 steps=$2 lr=$3; shift 3
  $MPIRUN "$BIN/train-baseline" -c configs/tiny_full.toml --set model.n_layers=$((TRUNK + 4)) \
    --set data.train="$CORPUS/train.h5" --set data.valid="$CORPUS/valid.h5" --set training.max_steps="$steps" \
    --set optimizer.lr="$lr" --set training.eval_every="$steps" --set checkpoint.every=0 \
    --set checkpoint.dir="$OUT/$name/checkpoints" --set training.run_dir="$OUT/$name" "$@" > "$OUT/$name.log" 2>&1 ||
    { tail -20 "$OUT/$name.log"; echo "train-generate-model: $name failed ($OUT/$name.log)" >&2; exit 1; }
  echo "$OUT/$name/checkpoints/$(cat "$OUT/$name/checkpoints/latest")"
}
drafting() {  # tokens per forward of checkpoint $1 at --speculative 4, greedy, on tasks $2
  "$BENCH" --checkpoint "$1" --tokenizer "$DATA/tokenizer.model" --tasks "$2" --drafting-only |
    sed -n 's/^tokens per forward \([0-9.]*\).*/\1/p'
}
done_in() { [ -f "$OUT/$1/checkpoints/latest" ] && echo "$OUT/$1/checkpoints/$(cat "$OUT/$1/checkpoints/latest")"; }
start=$SECONDS
ckpt=$(done_in run0 || train run0 "$FIRST" "$LR")
steps=$FIRST
first=1
while [ -n "$(done_in "run$first")" ]; do  # runs a previous invocation finished
  ckpt=$(done_in "run$first") steps=$((steps + MORE)) first=$((first + 1))
done
round=$first
while :; do
  tpf=$(drafting "$ckpt" "$TASKS") seen=$(drafting "$ckpt" data/tiny/tasks_mbpp_seen.jsonl)
  val=$(python3 -c 'import json,sys; print([r["val/loss"] for r in map(json.loads, open(sys.argv[1])) if "val/loss" in r][-1])' \
        "$(dirname "$(dirname "$ckpt")")/metrics.jsonl")
  echo "after $steps steps ($((SECONDS - start)) s): validation loss $val; tokens per forward (--speculative 4, greedy)" \
       "$tpf on $TASKS, $seen on the seen tasks"
  python3 -c "import sys; sys.exit(0 if float('$tpf') >= $MIN_TPF else 1)" && break
  [ "$round" -gt "$ROUNDS" ] && { echo "train-generate-model: below $MIN_TPF tokens per forward after $steps steps" >&2; exit 1; }
  ckpt=$(train "run$round" "$MORE" "$(python3 -c "print($LR / 2)")" --set training.init_weights="$ckpt")
  steps=$((steps + MORE)) round=$((round + 1))
done
cp "$ckpt" "$OUT/model.h5"
echo "bench model: $OUT/model.h5 ($TRUNK trunk blocks + 4 heads, $steps steps)"
