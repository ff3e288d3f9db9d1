#!/usr/bin/env bash
# Submit a chain of job scripts: each stage starts only after the previous one COMPLETED (exit 0);
# when a stage fails, every later stage is cancelled by Slurm and never runs. Run it where you run
# sbatch (a login node), from the repository root.
#
#   sbatch/pipeline.sh [--wait] [--dry-run] STAGE [:: STAGE]...
#   STAGE = [sbatch options] SCRIPT [script arguments]        (stages are separated by a lone ::)
#
# The research chain (preprocess -> critic -> verifiable policy), with the shipped configs as they are:
# stage 1 writes the datasets both configs read ([data] train/valid), stage 2 checkpoints into
# configs/critic.toml's [checkpoint] dir, which configs/verifiable.toml names as [verifiable] critic.
#   TOKENIZER=tok/tokenizer.model sbatch/pipeline.sh \
#     sbatch/preprocess.sbatch raw/train.jsonl data/codecontests/train.h5 raw/valid.jsonl data/codecontests/valid.h5 :: \
#     --export=ALL,PROGRAM=train-critic,CONFIG=configs/critic.toml sbatch/train.sbatch :: \
#     --export=ALL,PROGRAM=train-verifiable,CONFIG=configs/verifiable.toml sbatch/train.sbatch
# Baseline then merged weights:
#   sbatch/pipeline.sh sbatch/train.sbatch :: \
#     --export=ALL,CHECKPOINT_DIR=checkpoints/baseline,OUTPUT=runs/baseline/merged.h5 sbatch/merge-lora.sbatch
#
# Dependencies are `afterok` with --kill-on-invalid-dep=yes. A training stage that is requeued
# (checkpoint on SIGUSR1, exit 75) keeps its job id, so the next stage keeps waiting through the
# requeue and starts after the final, successful run.
# Output: one line per stage on stdout, "JOBID<TAB>stage words". With --wait the script also waits
# until every stage has ended, prints each one's final state, and exits 0 only if all COMPLETED.
# --dry-run prints the sbatch commands without submitting. Either way every stage's job script must
# exist before anything is submitted (exit 2 naming it): a typo in the last stage does not leave the
# first ones queued.
set -euo pipefail

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }
wait_all=0 dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --wait) wait_all=1; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
command -v sbatch > /dev/null || [ "$dry" = 1 ] || { echo "pipeline: sbatch not found (run this where you submit jobs)" >&2; exit 2; }

# Split the arguments into stages at each lone "::". The words stay in one array, every byte of them
# (newlines, empty words): stage i is words[start[i]] .. words[start[i] + len[i] - 1].
words=() start=() len=()
cur=0
flush() {
  [ "$cur" -gt 0 ] || { echo "pipeline: empty stage (two :: in a row, or :: at an end)" >&2; exit 2; }
  start+=($(( ${#words[@]} - cur ))); len+=("$cur"); cur=0
}
for a in "$@"; do
  if [ "$a" = "::" ]; then flush; else words+=("$a"); cur=$((cur + 1)); fi
done
flush
stage_words() { stage=("${words[@]:${start[$1]}:${len[$1]}}"); }  # stage_words I: stage I's words in $stage

# The job script of a stage: its first word that is neither an sbatch option nor an option's value.
# Options given as --opt=value or -Xvalue are one word; a bare short or long option takes the next
# word as its value unless it is one of sbatch's options without a value.
no_value_short=" -h -H -O -Q -s -v -V -W "
no_value_long=" --help --hold --ignore-pbs --overcommit --oversubscribe --parsable --quiet --requeue --no-requeue
  --spread-job --test-only --usage --verbose --version --wait --contiguous --exclusive --use-min-nodes --reboot
  --get-user-env --no-kill "
script_of() {  # script_of WORD...: prints the job script ("" when there is none)
  local skip=0 w
  for w in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$w" in
      --*=*) ;;
      --*) [[ "$no_value_long" == *" $w "* ]] || skip=1 ;;
      -?) [[ "$no_value_short" == *" $w "* ]] || skip=1 ;;
      -*) ;;
      *) printf '%s' "$w"; return ;;
    esac
  done
}
for i in "${!start[@]}"; do
  n=$((i + 1)); stage_words "$i"
  script=$(script_of "${stage[@]}")
  [ -n "$script" ] || { echo "pipeline: stage $n (${stage[*]}) names no job script" >&2; exit 2; }
  [ -f "$script" ] && [ -r "$script" ] || {
    echo "pipeline: stage $n: job script '$script' not found or not readable (run from the repository root;" \
         "nothing was submitted)" >&2; exit 2; }
done

[ "$dry" = 1 ] || mkdir -p logs   # the job scripts write logs/%x_%j.out; Slurm creates no directories
ids=()
prev=""
for i in "${!start[@]}"; do
  n=$((i + 1)); stage_words "$i"
  cmd=(sbatch --parsable)
  [ -n "$prev" ] && cmd+=(--dependency="afterok:$prev" --kill-on-invalid-dep=yes)
  cmd+=("${stage[@]}")
  if [ "$dry" = 1 ]; then
    printf 'stage %d:' "$n"; printf ' %q' "${cmd[@]}"; printf '\n'
    prev="JOBID_OF_STAGE_$n"
    continue
  fi
  out=$("${cmd[@]}") || { echo "pipeline: stage $n not submitted (${stage[*]}); stages before it: ${ids[*]:-none}" >&2; exit 1; }
  id=${out%%;*}
  ids+=("$id")
  prev=$id
  line="${stage[*]}"; printf '%s\t%s\n' "$id" "${line//$'\n'/\\n}"   # one line per stage, whatever the words hold
done
[ "$dry" = 1 ] && exit 0
[ "$wait_all" = 1 ] || exit 0

# --wait: poll until no stage is pending, running or being requeued.
terminal='^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED)$'
state_of() {  # state_of ID: the job's state as the controller knows it ("" once forgotten)
  squeue -h -j "$1" --states=all -o '%T' 2>/dev/null | head -1 || true
}
while :; do
  active=0
  for id in "${ids[@]}"; do
    st=$(state_of "$id")
    if [ -n "$st" ] && ! [[ "$st" =~ $terminal ]]; then active=1; break; fi
  done
  [ "$active" = 0 ] && break
  sleep "${PIPELINE_POLL_SECONDS:-5}"
done
rc=0
n=0
for id in "${ids[@]}"; do
  n=$((n + 1))
  st=$(state_of "$id")
  if [ -z "$st" ] && command -v sacct > /dev/null; then
    st=$(sacct -n -X -j "$id" -o State 2>/dev/null | awk 'NR==1 {print $1}' || true)
  fi
  reason=$(scontrol show job "$id" 2>/dev/null | grep -o 'Reason=[^ ]*' | head -1 || true)
  echo "pipeline: stage $n job $id ${st:-unknown} ${reason}" >&2
  [ "$st" = COMPLETED ] || rc=1
done
exit "$rc"
