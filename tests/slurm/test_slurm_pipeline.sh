#!/usr/bin/env bash
# sbatch/pipeline.sh under real Slurm: preprocess -> train-baseline -> merge-lora chained with afterok.
#  1. A good chain: every stage COMPLETED, each started after the previous one ended, and each left
#     its output (datasets, final checkpoint, merged weights). The training stage uses
#     LAUNCHER=mpirun inside the 2-node allocation (the srun path is test_slurm_train's).
#  2. A chain whose first stage fails (missing input): preprocess FAILED, the later stages are
#     CANCELLED by Slurm (DependencyNeverSatisfied) without ever starting: no log, no output.
#  3. pipeline.sh --wait exits 0 for the good chain and non-zero for the broken one.
set -u
source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_begin slurm_pipeline "$0" "$@"

TOK=${WMTP_TINY_TOKENIZER:?set by ctest: the tiny SentencePiece model}
export WMTP_BIN=$BIN TOKENIZER=$TOK MAX_LENGTH=256 PIPELINE_POLL_SECONDS=1

chain() {  # chain NAME INPUT_DIR: submit the three stages for run NAME, wait, print "id<TAB>words" lines
  local name=$1 in=$2 out=$TMP/$1
  bash "$SRC/sbatch/pipeline.sh" --wait \
    --job-name="$name-pre" --ntasks-per-node=2 "$SRC/sbatch/preprocess.sbatch" \
      "$in/train.jsonl" "$out/data/train.h5" "$in/valid.jsonl" "$out/data/valid.h5" :: \
    --job-name="$name-train" --export=ALL,PROGRAM=train-baseline,CONFIG="$SRC/configs/tiny.toml",LAUNCHER=mpirun \
      --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0 --time=30 "$SRC/sbatch/train.sbatch" \
      --set data.train="$out/data/train.h5" --set data.valid="$out/data/valid.h5" --set training.max_steps=4 \
      --set checkpoint.every=0 --set checkpoint.dir="$out/ckpt" --set training.run_dir="$out/run" :: \
    --job-name="$name-merge" --export=ALL,CHECKPOINT_DIR="$out/ckpt",OUTPUT="$out/merged.h5" \
      "$SRC/sbatch/merge-lora.sbatch"
}

# 1. the good chain
chain good "$SRC/data/tiny" > "$TMP/good.ids" 2> "$TMP/good.err"; rc=$?
cat "$TMP/good.err"
[ "$rc" = 0 ] && ok "pipeline --wait: good chain exit 0" || bad "pipeline --wait: good chain exit $rc"
mapfile -t ids < <(cut -f1 "$TMP/good.ids")
[ ${#ids[@]} = 3 ] && ok "3 stages submitted (${ids[*]})" || bad "expected 3 job ids, got: $(cat "$TMP/good.ids")"
prev_end=""
for i in "${!ids[@]}"; do
  id=${ids[$i]}; st=$(job_field "$id" JobState); start=$(job_field "$id" StartTime); end=$(job_field "$id" EndTime)
  [ "$st" = COMPLETED ] && ok "stage $((i+1)) (job $id) COMPLETED" || bad "stage $((i+1)) (job $id) $st"
  if [ -n "$prev_end" ]; then
    # ISO timestamps compare as strings; Slurm's resolution is 1 s, so equal means "right after".
    if [[ ! "$start" < "$prev_end" ]]; then ok "stage $((i+1)) started $start, after stage $i ended $prev_end"
    else bad "stage $((i+1)) started $start before stage $i ended $prev_end"; fi
  fi
  prev_end=$end
done
[ -f "$TMP/good/data/train.h5" ] && [ -f "$TMP/good/data/valid.h5" ] && ok "preprocess wrote both datasets" || bad "datasets missing"
[ -f "$TMP/good/ckpt/$(cat "$TMP/good/ckpt/latest" 2>/dev/null)" ] && [ "$(cat "$TMP/good/ckpt/latest")" = step_00000004.h5 ] \
  && ok "training finished at step 4 on the stage-1 data" || bad "no final checkpoint step_00000004.h5"
grep -q "launcher=mpirun" "$TMP/logs/good-train_${ids[1]:-x}.out" 2>/dev/null && grep -q "world 2 rank(s) on 2 node(s)" "$TMP/logs/good-train_${ids[1]:-x}.out" \
  && ok "training ran through mpirun on 2 nodes" || bad "training log does not show mpirun on 2 nodes"
"$BIN/convert-checkpoint" inspect "$TMP/good/merged.h5" > "$TMP/merged.txt" 2>&1 && ok "merge-lora wrote a readable merged checkpoint" \
  || { bad "merged checkpoint missing or unreadable"; tail -5 "$TMP/merged.txt"; }

# 2. the broken chain: the first stage's input does not exist
mkdir -p "$TMP/nowhere"
chain broken "$TMP/nowhere" > "$TMP/broken.ids" 2> "$TMP/broken.err"; rc=$?
cat "$TMP/broken.err"
[ "$rc" != 0 ] && ok "pipeline --wait: broken chain exit $rc" || bad "pipeline --wait: broken chain exit 0"
mapfile -t ids < <(cut -f1 "$TMP/broken.ids")
[ "$(job_field "${ids[0]:-x}" JobState)" = FAILED ] && ok "stage 1 FAILED ($(job_field "${ids[0]}" ExitCode))" || bad "stage 1 $(job_field "${ids[0]:-x}" JobState)"
grep -q "train.jsonl" "$TMP/logs/broken-pre_${ids[0]:-x}.out" && ok "stage 1 log names the missing input" || bad "stage 1 log does not name the input"
for i in 1 2; do
  id=${ids[$i]:-x}; st=$(job_field "$id" JobState); reason=$(job_field "$id" Reason)
  [ "$st" = CANCELLED ] && [ "$reason" = DependencyNeverSatisfied ] && ok "stage $((i+1)) CANCELLED ($reason)" \
    || bad "stage $((i+1)) $st ($reason)"
  [ "$(job_field "$id" StartTime)" = Unknown ] || [ "$(job_field "$id" RunTime)" = 00:00:00 ] \
    && ok "stage $((i+1)) never ran" || bad "stage $((i+1)) ran for $(job_field "$id" RunTime)"
done
ls "$TMP"/logs/broken-train_* "$TMP"/logs/broken-merge_* > /dev/null 2>&1 && bad "a later stage wrote a log" || ok "no later stage wrote a log"
[ ! -e "$TMP/broken/run" ] && [ ! -e "$TMP/broken/ckpt" ] && [ ! -e "$TMP/broken/merged.h5" ] && ok "no later stage wrote output" \
  || bad "output of a later stage exists"

slurm_test_end
