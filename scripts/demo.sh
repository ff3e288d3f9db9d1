#!/usr/bin/env bash
# make demo: the main job end to end on the bundled tiny corpus, at 2 ranks, in a few minutes.
#   1. data: a SentencePiece tokenizer, then preprocess-metadata (np 2): JSONL -> HDF5 datasets
#   2. full fine-tuning of a tiny MTP model from a random initialization (configs/tiny_full.toml):
#      it stops itself halfway like a preempted job (checkpoint, exit 75) and resumes; the
#      validation loss must fall well below a uniform guess, or the demo fails
#   3. LoRA on top of those weights (configs/tiny.toml + training.init_weights), then merge-lora and
#      convert-checkpoint export (safetensors with HF names, PEFT adapters)
#   4. rho1: a one-head reference model, then train-rho1 (tokens selected by excess loss)
#   5. critic -> verifiable: a value model on the merged weights, then train-verifiable (tokens weighted
#      by the frozen critic's TD errors)
#   6. evaluate: stage 2's model trained 160 steps more (baseline220) and a verifiable LoRA on it
#      (verifiable220); pass@1 (greedy) on bundled MBPP-format tasks seen in training (data/tiny/
#      tasks_mbpp_seen.jsonl) and held out (data/tiny/tasks_mbpp.jsonl), plain and with --speculative 4
#      (heads 1-3 draft): the greedy pass@1 must not change; tokens per forward and the speed-up are printed
# Prints the loss curves, draws each stage's curves as a PNG (scripts/plot-run) and says where
# everything is. Outputs: build/tiny (data), runs/tiny (runs, TensorBoard event files, PNGs).
# Run from the repository root (make demo does). WMTP_BIN_DIR overrides bin/.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${WMTP_BIN_DIR:-bin}
OUT=build/tiny
RUN=runs/tiny
MPIRUN="mpirun --oversubscribe -np 2"
[ "$(id -u)" -eq 0 ] && MPIRUN="mpirun --oversubscribe --allow-run-as-root -np 2"
export OMP_NUM_THREADS=1
start=$(date +%s)
step() { printf '\n== %s  [%ds]\n' "$*" $(( $(date +%s) - start )); }
die() { echo "demo: $*" >&2; exit 1; }
# curve RUN_DIR TITLE: the train and validation losses of a run, from its metrics.jsonl
curve() {
  python3 - "$1/metrics.jsonl" "$2" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train, val, acc = {}, {}, {}
for r in rows:  # a resumed run appends; the last record of a step wins
    if "train/loss" in r: train[r["step"]] = r["train/loss"]
    if "val/loss" in r: val[r["step"]] = r["val/loss"]
    if "val/pairwise_accuracy" in r: acc[r["step"]] = r["val/pairwise_accuracy"]  # a critic
print(f"{sys.argv[2]}: step, train loss, validation loss" + (", validation pairwise accuracy" if acc else ""))
for s in sorted(set(train) | set(val)):
    if s in val or s == min(train) or s % 5 == 0:
        v = f"{val[s]:.4f}" if s in val else ""
        a = f"  {acc[s]:.2f}" if s in acc else ""
        print(f"  {s:4d}  {train.get(s, float('nan')):.4f}  {v}{a}")
PY
}

# plot RUN_DIR...: a PNG of the stage's curves (scripts/plot-run), remembered for the summary
plots=()
plot() {
  local png
  png=$(scripts/plot-run "$@") || die "scripts/plot-run $* failed"
  plots+=("$png")
  echo "curves: $png"
}

rm -rf "$RUN"
mkdir -p "$OUT"

step "1. data: SentencePiece BPE tokenizer, then preprocess-metadata at 2 ranks"
data/make_tokenizer.sh "$OUT/tokenizer"
for split in train valid; do
  $MPIRUN "$BIN/preprocess-metadata" --input "data/tiny/$split.jsonl" --tokenizer "$OUT/tokenizer.model" \
    --output "$OUT/$split.h5" --max-length 256
done

step "2. full fine-tuning of a tiny MTP model (random init, 4 heads) at 2 ranks: 30 of 60 steps, then stop like a preempted job"
set +e
$MPIRUN "$BIN/train-baseline" -c configs/tiny_full.toml --set training.stop_after_steps=30
rc=$?
set -e
[ "$rc" -eq 75 ] || die "expected exit 75 (checkpointed, resume me), got $rc"
step "2. train-baseline again: resumes from the newest checkpoint and finishes"
$MPIRUN "$BIN/train-baseline" -c configs/tiny_full.toml
full_final="$RUN/full/checkpoints/$(cat "$RUN/full/checkpoints/latest")"
echo
curve "$RUN/full" "full fine-tuning"
plot "$RUN/full"
python3 - "$RUN/full/metrics.jsonl" <<'PY' || die "the validation loss did not fall well below a uniform guess"
import json, math, sys
val = [r["val/loss"] for r in map(json.loads, open(sys.argv[1])) if "val/loss" in r]
uniform = math.log(512)
print(f"validation loss {val[0]:.2f} (step 10) -> {val[-1]:.2f}; a uniform guess over 512 tokens scores {uniform:.2f}")
assert val[-1] < uniform - 1.5 and val[-1] < val[0]
PY

step "3. LoRA on top of $full_final (rank 8 on every projection) at 2 ranks"
lora=(-c configs/tiny.toml --set training.init_weights="$full_final" --set training.max_steps=20
      --set training.eval_every=10 --set training.run_dir="$RUN/lora" --set checkpoint.dir="$RUN/lora/checkpoints")
$MPIRUN "$BIN/train-baseline" "${lora[@]}"
lora_final="$RUN/lora/checkpoints/$(cat "$RUN/lora/checkpoints/latest")"
echo
curve "$RUN/lora" "LoRA stage"
plot "$RUN/lora"
step "3. merge-lora: fold the adapters of $lora_final into its base weights"
"$BIN/merge-lora" --base "$lora_final" --output "$RUN/merged.h5"   # the checkpoint holds base + adapters
step "3. convert-checkpoint export: $RUN/merged.h5 -> safetensors (HF names, bf16); adapters -> PEFT"
"$BIN/convert-checkpoint" export --input "$RUN/merged.h5" --output "$RUN/export" --names hf --dtype bf16
"$BIN/convert-checkpoint" export --input "$lora_final" --output "$RUN/peft" --format peft

# RESEARCH PIPELINES: each a tiny chain on the same datasets, its policy LoRA on the stage-2 weights.
step "4. rho1: a one-head reference model (full fine-tuning), then train-rho1 selects tokens by excess loss"
$MPIRUN "$BIN/train-baseline" -c configs/tiny.toml --set model.n_future_tokens=1 --set model.n_layers=3 \
  --set lora.enabled=false --set optimizer.lr=3e-3 --set training.max_steps=30 --set checkpoint.every=0 \
  --set training.eval_every=0 --set data.valid="" \
  --set checkpoint.dir="$RUN/rho1-ref/checkpoints" --set training.run_dir="$RUN/rho1-ref"
$MPIRUN "$BIN/train-rho1" -c configs/tiny-rho1.toml --set rho1.reference="$RUN/rho1-ref/checkpoints" \
  --set training.init_weights="$full_final" --set training.max_steps=20 --set training.eval_every=10 \
  --set checkpoint.dir="$RUN/rho1/checkpoints" --set training.run_dir="$RUN/rho1"
echo
curve "$RUN/rho1" "rho1 (LoRA on the full fine-tuned model, tokens selected by excess loss)"
plot "$RUN/rho1"

step "5. critic: a value head (LoRA) on the merged model's trunk learns which solutions are correct (pairwise)"
$MPIRUN "$BIN/train-critic" -c configs/tiny-critic.toml --set training.init_weights="$RUN/merged.h5" \
  --set training.max_steps=80 --set checkpoint.dir="$RUN/critic/checkpoints" --set training.run_dir="$RUN/critic"
echo
curve "$RUN/critic" "critic (pairwise loss: ln 2 = 0.69 and accuracy 0.5 are a coin toss)"
plot "$RUN/critic"
step "5. verifiable: the policy's tokens weighted by the frozen critic's TD errors"
# verifiable INIT NAME: 20 steps of train-verifiable, a LoRA on INIT weighted by this critic, in $RUN/NAME
verifiable() {
  $MPIRUN "$BIN/train-verifiable" -c configs/tiny-verifiable.toml --set verifiable.critic="$RUN/critic/checkpoints" \
    --set training.init_weights="$1" --set training.max_steps=20 --set training.eval_every=10 \
    --set checkpoint.dir="$RUN/$2/checkpoints" --set training.run_dir="$RUN/$2"
}
verifiable "$full_final" verifiable
echo
curve "$RUN/verifiable" "verifiable (LoRA on the full fine-tuned model, critic-weighted tokens)"
plot "$RUN/verifiable"
plot "$RUN/lora" "$RUN/rho1" "$RUN/verifiable" -o "$RUN/policies.png"   # the three LoRA policies overlaid

# EVALUATION: stage 2's 60 steps leave the model writing unparsable code (pass@1 0 even on training
# prompts), so the evaluated models train on: stage 2's model 160 steps more, and a verifiable LoRA on that.
step "6. evaluation models: stage 2's model, full fine-tuning 160 steps more at lr 5e-3 (220 in all), then train-verifiable on it"
$MPIRUN "$BIN/train-baseline" -c configs/tiny_full.toml --set training.init_weights="$full_final" \
  --set training.max_steps=160 --set optimizer.lr=5e-3 --set training.eval_every=80 --set checkpoint.every=0 \
  --set checkpoint.dir="$RUN/full220/checkpoints" --set training.run_dir="$RUN/full220"
full220_final="$RUN/full220/checkpoints/$(cat "$RUN/full220/checkpoints/latest")"
verifiable "$full220_final" verifiable220
echo
curve "$RUN/full220" "full fine-tuning, 160 steps more"
plot "$RUN/full220"

step "6. evaluate: pass@1 (greedy) on MBPP-format tasks seen in training and held out, plain, then --speculative 4"
mkdir -p "$RUN/eval"
cp "$full_final" "$RUN/eval/baseline60.h5"       # the output directories are named after the files
cp "$full220_final" "$RUN/eval/baseline220.h5"
cp "$RUN/verifiable220/checkpoints/$(cat "$RUN/verifiable220/checkpoints/latest")" "$RUN/eval/verifiable220.h5"
for set in seen heldout; do
  tasks=data/tiny/tasks_mbpp.jsonl
  [ "$set" = seen ] && tasks=data/tiny/tasks_mbpp_seen.jsonl
  for spec in 1 4; do
    ckpts=(--checkpoint "$RUN/eval/baseline220.h5" --checkpoint "$RUN/eval/verifiable220.h5")
    [ "$spec" = 1 ] && ckpts+=(--checkpoint "$RUN/eval/baseline60.h5")   # stage 2's model, for contrast
    # one sample per task: each task is a batch of one, plain and speculative alike, so the times compare
    $MPIRUN "$BIN/evaluate" --benchmark mbpp --data "$tasks" "${ckpts[@]}" --tokenizer "$OUT/tokenizer.model" \
      --output "$RUN/eval/$set-spec$spec" --num-samples 1 --temperature 0 --max-new-tokens 128 --batch-size 1 \
      --speculative $spec --tensorboard false || die "evaluate $tasks --speculative $spec failed"
  done
done
python3 - "$RUN/eval" <<'PY' || die "the evaluation's summaries are missing, disagree or say nothing"
import json, sys
d = sys.argv[1]
def load(name):
    return {s["checkpoint"].rsplit("/", 1)[-1][:-3]: s for s in json.load(open(f"{d}/{name}/summary.json"))}
sets = (("seen", "tasks seen in training (data/tiny/tasks_mbpp_seen.jsonl: train.jsonl's own prompts, new asserts)"),
        ("heldout", "held-out tasks (data/tiny/tasks_mbpp.jsonl: the same families, prompts no training sample has)"))
for key, what in sets:
    plain, spec = load(f"{key}-spec1"), load(f"{key}-spec4")
    print(f"pass@1 (greedy, 1 sample per task) on {plain['baseline220']['tasks']} {what}:")
    p = plain["baseline60"]
    print(f"  {'baseline60':13s} pass@1 {p['pass@1']:.3f}   (stage 2's model: 60 steps)")
    for name in ("baseline220", "verifiable220"):
        p, s = plain[name], spec[name]
        print(f"  {name:13s} pass@1 {p['pass@1']:.3f}   --speculative 4: pass@1 {s['pass@1']:.3f}, "
              f"{s['tokens_per_forward']:.2f} tokens per forward, draft acceptance per head "
              f"{', '.join(f'{a:.2f}' for a in s['draft_acceptance_per_head'])}; generation (batch 1) "
              f"{p['generate_seconds']:.2f} s -> {s['generate_seconds']:.2f} s ({p['generate_seconds'] / s['generate_seconds']:.2f}x)")
        # greedy self-speculative decoding is head-0 greedy decoding: the same completions, the same score
        assert p["pass@1"] == s["pass@1"], (key, name, p["pass@1"], s["pass@1"])
    # the numbers must say something: the trained baseline solves some seen tasks, not all
    if key == "seen":
        assert 0 < plain["baseline220"]["pass@1"] < 1, plain["baseline220"]["pass@1"]
PY

cat <<MSG

outputs:
  tokenizer       $OUT/tokenizer.model
  datasets        $OUT/train.h5 $OUT/valid.h5
  full run        $RUN/full/  (metrics.jsonl, config.toml, checkpoints/: latest $(cat $RUN/full/checkpoints/latest))
  LoRA run        $RUN/lora/  (latest $(cat $RUN/lora/checkpoints/latest))
  merged model    $RUN/merged.h5
  safetensors     $RUN/export/   (HF names; MTP extra heads in a sidecar file)
  PEFT adapters   $RUN/peft/
  rho1 run        $RUN/rho1/  (reference model: $RUN/rho1-ref/)
  critic run      $RUN/critic/
  verifiable run  $RUN/verifiable/
  evaluated runs  $RUN/full220/ (stage 2's model, 160 steps more), $RUN/verifiable220/
  evaluation      $RUN/eval/{seen,heldout}-spec{1,4}/  (per checkpoint: tasks.csv, samples.jsonl, summary.json)
  curves (PNG)    ${plots[*]}
  TensorBoard     tensorboard --logdir $RUN   (every run's event files, in <run>/tensorboard/)
demo finished in $(( $(date +%s) - start )) s
MSG
