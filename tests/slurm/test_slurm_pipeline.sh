#!/usr/bin/env bash
# sbatch/pipeline.sh under real Slurm: the research chain preprocess -> train-critic ->
# train-verifiable (-> merge-lora of the policy) chained with afterok, run with the shipped tiny
# configs unchanged (configs/tiny-critic.toml, configs/tiny-verifiable.toml): the stages find each
# other through the configs' own relative paths, resolved in the submit directory, as the production
# configs do (build/tiny/*.h5 written by stage 1 and read by both trainers; runs/tiny-critic/checkpoints
# written by stage 2, named by [verifiable] critic in stage 3). Only max_steps is shortened.
#  0. The production configs are linked the same way (configs/critic.toml's [checkpoint] dir is
#     configs/verifiable.toml's [verifiable] critic; both read the same datasets), and the chain
#     documented in docs/slurm.md and pipeline.sh writes those datasets.
#  1. A good chain: every stage COMPLETED, each started after the previous one ended, each left its
#     output; both trainers ran at 2 tasks through srun (pmix), the critic on 2 nodes x 1, the policy
#     on 1 node x 2; the policy's frozen critic is the critic stage's final checkpoint.
#  2. A chain whose first stage fails (missing input): preprocess FAILED, the later stages are
#     CANCELLED by Slurm (DependencyNeverSatisfied) without ever starting: no log, no output.
#  3. pipeline.sh --wait exits 0 for the good chain and non-zero for the broken one.
# The backbone both trainers start from (the tiny configs' runs/tiny/merged.h5; in production an
# imported checkpoint) exists before the chain: 1 step of train-baseline, merged, outside Slurm.
set -u
source "$(dirname "$0")/slurm_test_lib.sh"
slurm_test_begin slurm_pipeline "$0" "$@"

TOK=${WMTP_TINY_TOKENIZER:?set by ctest: the tiny SentencePiece model}
DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
export WMTP_BIN=$BIN TOKENIZER=$TOK MAX_LENGTH=256 PIPELINE_POLL_SECONDS=1 OMP_NUM_THREADS=1
STEPS=4

# 0. the production chain's links, read from the resolved configs
key() { "$BIN/$1" -c "$SRC/configs/$2" --print-config | python3 -c 'import sys, tomllib; d = tomllib.loads(sys.stdin.read()); print(d[sys.argv[1]][sys.argv[2]])' "$3" "$4"; }
c_dir=$(key train-critic critic.toml checkpoint dir); v_critic=$(key train-verifiable verifiable.toml verifiable critic)
[ -n "$c_dir" ] && [ "$c_dir" = "$v_critic" ] && ok "production configs: critic writes $c_dir, verifiable reads it" \
  || bad "production configs: critic [checkpoint] dir '$c_dir' but verifiable [verifiable] critic '$v_critic'"
for split in train valid; do
  c=$(key train-critic critic.toml data "$split"); v=$(key train-verifiable verifiable.toml data "$split")
  [ -n "$c" ] && [ "$c" = "$v" ] && grep -q " $c " "$SRC/docs/slurm.md" && grep -q " $c " "$SRC/sbatch/pipeline.sh" \
    && ok "production configs: both read data.$split = $c, which the documented chain writes" \
    || bad "data.$split: critic '$c', verifiable '$v', or the documented chain does not write it"
done

chain() {  # chain NAME INPUT_DIR: in $TMP/NAME, submit the four stages, wait, print "id<TAB>words" lines
  local name=$1 in=$2
  mkdir -p "$TMP/$name" && cd "$TMP/$name" || return 1
  bash "$SRC/sbatch/pipeline.sh" --wait \
    --job-name="$name-pre" --ntasks-per-node=2 "$SRC/sbatch/preprocess.sbatch" \
      "$in/train.jsonl" build/tiny/train.h5 "$in/valid.jsonl" build/tiny/valid.h5 :: \
    --job-name="$name-critic" --export=ALL,PROGRAM=train-critic,CONFIG="$SRC/configs/tiny-critic.toml" \
      --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0 --time=30 "$SRC/sbatch/train.sbatch" \
      --set training.max_steps=$STEPS --set logging.peak_tflops=1.0 :: \
    --job-name="$name-policy" --export=ALL,PROGRAM=train-verifiable,CONFIG="$SRC/configs/tiny-verifiable.toml" \
      --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-node=0 --time=30 "$SRC/sbatch/train.sbatch" \
      --set training.max_steps=$STEPS --set logging.peak_tflops=1.0 :: \
    --job-name="$name-merge" --export=ALL,CHECKPOINT_DIR=runs/tiny-verifiable/checkpoints,OUTPUT=runs/tiny-verifiable/merged.h5 \
      "$SRC/sbatch/merge-lora.sbatch"
  local rc=$?
  cd "$TMP"
  return $rc
}

# The backbone, where the tiny configs look for it (training.init_weights = "runs/tiny/merged.h5").
mkdir -p "$TMP/good/runs/tiny"
if "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5" \
     --set training.max_steps=1 --set checkpoint.every=0 --set checkpoint.dir="$TMP/backbone/ckpt" \
     --set training.run_dir="$TMP/backbone" --set logging.peak_tflops=1.0 > "$TMP/backbone.log" 2>&1 \
   && "$BIN/merge-lora" --base "$TMP/backbone/ckpt/step_00000001.h5" --output "$TMP/good/runs/tiny/merged.h5" >> "$TMP/backbone.log" 2>&1
then ok "backbone runs/tiny/merged.h5 (1 step, merged)"; else bad "backbone"; tail -10 "$TMP/backbone.log"; fi

# 1. the good chain
chain good "$SRC/data/tiny" > "$TMP/good.ids" 2> "$TMP/good.err"; rc=$?
cat "$TMP/good.err"
[ "$rc" = 0 ] && ok "pipeline --wait: good chain exit 0" || bad "pipeline --wait: good chain exit $rc"
mapfile -t ids < <(cut -f1 "$TMP/good.ids")
[ ${#ids[@]} = 4 ] && ok "4 stages submitted (${ids[*]})" || bad "expected 4 job ids, got: $(cat "$TMP/good.ids")"
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
G=$TMP/good
[ -f "$G/build/tiny/train.h5" ] && [ -f "$G/build/tiny/valid.h5" ] && ok "preprocess wrote both datasets" || bad "datasets missing"
final=step_0000000$STEPS.h5
[ "$(cat "$G/runs/tiny-critic/checkpoints/latest" 2>/dev/null)" = "$final" ] && [ -f "$G/runs/tiny-critic/checkpoints/$final" ] \
  && ok "train-critic finished at step $STEPS on the stage-1 data" || bad "no final critic checkpoint $final"
[ "$(cat "$G/runs/tiny-verifiable/checkpoints/latest" 2>/dev/null)" = "$final" ] && [ -f "$G/runs/tiny-verifiable/checkpoints/$final" ] \
  && ok "train-verifiable finished at step $STEPS" || bad "no final policy checkpoint $final"
launched() {  # launched LOG PROGRAM LAYOUT: the job ran PROGRAM through srun (pmix) as LAYOUT
  grep -q "program=$2 .*launcher=srun" "$1" && grep -q "0: .*world 2 rank(s) on $3 .*launcher srun (pmix)" "$1"
}
clog=$TMP/good/logs/good-critic_${ids[1]:-x}.out; plog=$TMP/good/logs/good-policy_${ids[2]:-x}.out
launched "$clog" train-critic "2 node(s), 1 on this node" && ok "train-critic ran through srun at 2 tasks on 2 nodes" \
  || { bad "critic log does not show srun (pmix) at 2 tasks on 2 nodes"; tail -5 "$clog"; }
launched "$plog" train-verifiable "1 node(s), 2 on this node" && ok "train-verifiable ran through srun at 2 tasks on 1 node" \
  || { bad "policy log does not show srun (pmix) at 2 tasks on 1 node"; tail -5 "$plog"; }
grep -q "model critic: .*weights runs/tiny-critic/checkpoints/$final$" "$plog" \
  && ok "the policy's critic is the critic stage's final checkpoint" || { bad "policy log names another critic"; grep "critic" "$plog" | head -3; }
python3 - "$G/runs/tiny-verifiable/metrics.jsonl" <<'PY' && ok "policy metrics: $STEPS steps with critic weights (td/*, weight/*)" || bad "policy metrics"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "train/weighted_ce_loss" in r]
assert [r["step"] for r in train][-1] == 4, [r["step"] for r in train]
assert all(k in train[-1] for k in ["td/ema_mean", "td/ema_std", "weight/mean", "weight/max"]), sorted(train[-1])
PY
"$BIN/convert-checkpoint" inspect "$G/runs/tiny-verifiable/merged.h5" > "$TMP/merged.txt" 2>&1 && ok "merge-lora wrote the merged policy" \
  || { bad "merged policy missing or unreadable"; tail -5 "$TMP/merged.txt"; }

# 2. the broken chain: the first stage's input does not exist
mkdir -p "$TMP/nowhere"
chain broken "$TMP/nowhere" > "$TMP/broken.ids" 2> "$TMP/broken.err"; rc=$?
cat "$TMP/broken.err"
[ "$rc" != 0 ] && ok "pipeline --wait: broken chain exit $rc" || bad "pipeline --wait: broken chain exit 0"
mapfile -t ids < <(cut -f1 "$TMP/broken.ids")
[ ${#ids[@]} = 4 ] && ok "4 stages submitted (${ids[*]})" || bad "expected 4 job ids, got: $(cat "$TMP/broken.ids")"
B=$TMP/broken
[ "$(job_field "${ids[0]:-x}" JobState)" = FAILED ] && ok "stage 1 FAILED ($(job_field "${ids[0]}" ExitCode))" || bad "stage 1 $(job_field "${ids[0]:-x}" JobState)"
grep -q "train.jsonl" "$B/logs/broken-pre_${ids[0]:-x}.out" && ok "stage 1 log names the missing input" || bad "stage 1 log does not name the input"
for i in 1 2 3; do
  id=${ids[$i]:-x}; st=$(job_field "$id" JobState); reason=$(job_field "$id" Reason)
  [ "$st" = CANCELLED ] && [ "$reason" = DependencyNeverSatisfied ] && ok "stage $((i+1)) CANCELLED ($reason)" \
    || bad "stage $((i+1)) $st ($reason)"
  [ "$(job_field "$id" StartTime)" = Unknown ] || [ "$(job_field "$id" RunTime)" = 00:00:00 ] \
    && ok "stage $((i+1)) never ran" || bad "stage $((i+1)) ran for $(job_field "$id" RunTime)"
done
ls "$B"/logs/broken-critic_* "$B"/logs/broken-policy_* "$B"/logs/broken-merge_* > /dev/null 2>&1 \
  && bad "a later stage wrote a log" || ok "no later stage wrote a log"
[ ! -e "$B/runs" ] && [ ! -e "$B/build/tiny/train.h5" ] && ok "no stage wrote output" || bad "output of a stage exists"

slurm_test_end
