#!/usr/bin/env bash
# sbatch/pipeline.sh without Slurm (--dry-run, and a real submission with a missing script): every
# stage's job script is checked before anything is submitted.
#  1. --dry-run of the research chain prints one sbatch command per stage, each after the previous
#     (afterok), exit 0; options with separate values (-N 2, --time 10) are skipped over.
#  2. --dry-run with a missing job script (first stage, or the last stage behind good ones): exit 2,
#     one message naming the file and the stage, no sbatch command printed.
#  3. The same without --dry-run (a stand-in sbatch that records its calls): exit 2, nothing submitted.
#  4. Every word of a stage reaches sbatch as given: one holding a newline, an empty one at the end
#     of a stage, and the stages after them (the stand-in records each argument).
set -u
SRC=${WMTP_SOURCE_DIR:?set by ctest}; TMP=${WMTP_TEST_TMP_DIR:?set by ctest}/pipeline_dry_run
rm -rf "$TMP"; mkdir -p "$TMP/bin"; cd "$SRC" || exit 1
source "$SRC/tests/support/checks.sh"
P=sbatch/pipeline.sh

out=$(bash $P --dry-run -N 2 --time 10 sbatch/preprocess.sbatch a b :: --export=ALL,PROGRAM=train-critic sbatch/train.sbatch \
  :: --requeue sbatch/train.sbatch 2>&1); rc=$?
if [ "$rc" = 0 ] && [ "$(grep -c '^stage [123]: sbatch --parsable' <<< "$out")" = 3 ] \
   && grep -q '^stage 3: .*--dependency=afterok:JOBID_OF_STAGE_2' <<< "$out"; then ok "dry run of 3 stages (exit 0)"
else bad "dry run of 3 stages: exit $rc"; echo "$out"; fi

# missing NAME ARGS...: exit 2, one line naming the file, no stage printed
missing() {
  local name=$1 file=$2; shift 2
  out=$(bash $P "$@" 2>&1); rc=$?
  if [ "$rc" = 2 ] && grep -q "job script '$file' not found" <<< "$out" && ! grep -q '^stage [0-9]*: sbatch' <<< "$out" \
     && [ "$(wc -l <<< "$out")" = 1 ]; then ok "$name: exit 2 naming $file"
  else bad "$name: exit $rc"; echo "$out"; fi
}
missing "dry run, missing script" sbatch/nonexistent.sbatch --dry-run sbatch/nonexistent.sbatch
missing "dry run, last stage missing" sbatch/missing.sbatch --dry-run sbatch/train.sbatch :: -J x sbatch/missing.sbatch

# A stand-in sbatch on PATH: records what would have been submitted.
printf '#!/bin/sh\necho "$*" >> "%s/submitted"\necho 42\n' "$TMP" > "$TMP/bin/sbatch"; chmod +x "$TMP/bin/sbatch"
PATH="$TMP/bin:$PATH" missing "submission, last stage missing" sbatch/missing.sbatch sbatch/train.sbatch :: sbatch/missing.sbatch
[ ! -e "$TMP/submitted" ] && ok "nothing submitted" || bad "submitted: $(cat "$TMP/submitted")"

# 4. Words with a newline and an empty last word: sbatch gets every one of them, in every stage.
rm -f "$TMP/submitted"
cat > "$TMP/bin/sbatch" <<SH
#!/usr/bin/env python3
import json, sys
open("$TMP/submitted", "a").write(json.dumps(sys.argv[1:]) + "\n")
print(42)
SH
out=$(PATH="$TMP/bin:$PATH" bash $P sbatch/train.sbatch --set $'a=1\nb=2' --set x '' :: sbatch/train.sbatch '' 2>&1); rc=$?
python3 - "$TMP/submitted" <<'PY' && [ "$rc" = 0 ] && ok "words with a newline and empty words reach sbatch, both stages" \
  || { bad "stage words lost (exit $rc): $out"; cat "$TMP/submitted" 2>/dev/null; }
import json, sys
calls = [json.loads(l) for l in open(sys.argv[1])]
assert calls[0] == ["--parsable", "sbatch/train.sbatch", "--set", "a=1\nb=2", "--set", "x", ""], calls
assert calls[1][-2:] == ["sbatch/train.sbatch", ""] and len(calls) == 2, calls
PY
[ "$(grep -c $'^42\t' <<< "$out")" = 2 ] && ok "one output line per stage" || bad "output lines: $out"

checks_finish
