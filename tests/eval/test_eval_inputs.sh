#!/usr/bin/env bash
# bin/generate and bin/evaluate refuse what they cannot honour, with exit 2 and a message naming the
# flag, key or file:line, before any work (and no file written):
#  1. Flags, checked before any file is read (every input file below is missing, so a refusal that
#     names the flag came first): --temperature nan/inf, --top-p nan/0/2, --max-new-tokens 0/-5,
#     --num-samples -1 (generate: 0), --speculative 0, --batch-size 0, --dtype, --device, for both
#     programs; evaluate's --timeout 0/-1/nan/inf/1e300, --benchmark, --max-tasks -1, --mlflow-uri
#     ftp://... and one with a password; generate's --stop ''.
#  2. Against the model, before it is loaded: --max-new-tokens INT64_MAX and 257 (max_seq_len 256),
#     --speculative 4 (n_future 3); a model of a smaller vocabulary than --tokenizer (400 ids; a
#     padded 600-id one generates what the unpadded model does, greedy, speculative and sampled);
#     a checkpoint whose recorded tokenizer fingerprint is not --tokenizer's (a trained checkpoint
#     with its fingerprint replaced) — the same checkpoint with the real fingerprint is accepted.
#  3. Benchmark rows, with file:line: MBPP `test_list: []`, a non-string `test_setup_code`; a GSM8K
#     answer without a number, and one whose number a double cannot hold.
#  4. evaluate checks every --checkpoint before the first forward (a missing second one: no result of
#     the first is written), and an MLflow file store it cannot write; an earlier OUTPUT/summary.json
#     does not outlive a run that fails; the checkpoints a/step.h5, b/step.h5 and c/step_1.h5 get
#     three result directories.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/eval_lib.sh"
eval_setup eval_inputs 4
DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
HE=$SRC/tests/eval/data/humaneval_tiny.jsonl
echo '{"id": "p0", "prompt": "def add(a, b):"}' > prompts.jsonl

# refused NAME NEEDLE OUT CMD...: exit 2, the output holds NEEDLE (fixed string), no file written at or
# under OUT (evaluate makes its --output directory when it checks it, as every program does)
refused() {
  local name=$1 needle=$2 out=$3 log rc written; shift 3
  log=$("$@" 2>&1); rc=$?
  written=$(find "$out" -type f 2> /dev/null | head -3 | tr '\n' ' ')
  if [ "$rc" = 2 ] && grep -qF -- "$needle" <<< "$log" && [ -z "$written" ]; then ok "$name: exit 2"
  else bad "$name: exit $rc${written:+, wrote $written}: $(tail -3 <<< "$log")"; fi
  rm -rf "$out"
}
# Both programs with input files that do not exist: only a flag check can answer first.
gen_flag() { local needle=$1; shift
  refused "generate $*" "$needle" out.jsonl "$BIN/generate" --checkpoint nowhere.h5 --tokenizer nowhere.model \
    --prompts nowhere.jsonl --output out.jsonl "$@"; }
ev_flag() { local needle=$1; shift
  refused "evaluate $*" "$needle" evout "$BIN/evaluate" --benchmark humaneval --data nowhere.jsonl \
    --checkpoint nowhere.h5 --tokenizer nowhere.model --output evout "$@"; }

# 1. Flags.
for prog in gen_flag ev_flag; do
  $prog "--temperature nan" --temperature nan
  $prog "--temperature inf" --temperature inf
  $prog "--top-p nan" --top-p nan
  $prog "--top-p 0" --top-p 0
  $prog "--top-p 2" --top-p 2
  $prog "--max-new-tokens 0" --max-new-tokens 0
  $prog "--max-new-tokens -5" --max-new-tokens=-5
  $prog "--num-samples -1" --num-samples=-1
  $prog "--speculative 0" --speculative 0
  $prog "--batch-size 0" --batch-size 0
  $prog "--dtype must be fp32 or bf16" --dtype fp16
  $prog "--device must be cpu, cuda or cuda:N" --device tpu
done
gen_flag "--num-samples 0" --num-samples 0
gen_flag "--stop ''" --stop ''
for t in 0 -1 nan inf 1e300; do ev_flag "--timeout" --timeout="$t"; done
refused "evaluate --benchmark humaneva" "--benchmark must be" evout "$BIN/evaluate" --benchmark humaneva --data nowhere.jsonl \
  --checkpoint nowhere.h5 --tokenizer nowhere.model --output evout
ev_flag "--max-tasks -1" --max-tasks=-1
ev_flag "--mlflow-uri 'ftp://host/mlruns'" --mlflow-uri ftp://host/mlruns
ev_flag "--mlflow-uri 'http://***@host:5000'" --mlflow-uri http://alice:s3cret@host:5000

# 2. Against the model (max_seq_len 256, n_future 3, 512 ids), before it is loaded.
# gen|ev CHECKPOINT ARGS...: 8 new tokens (evaluate: 1 sample) unless ARGS say otherwise
gen() { local d=(--max-new-tokens 8); [[ " $* " == *" --max-new-tokens "* ]] && d=()
  "$BIN/generate" --checkpoint "$1" --tokenizer "$TOK" --prompts prompts.jsonl --output out.jsonl "${d[@]}" "${@:2}"; }
ev() { local d=(--max-new-tokens 8) n=(--num-samples 1)
  [[ " $* " == *" --max-new-tokens "* ]] && d=(); [[ " $* " == *" --num-samples "* ]] && n=()
  "$BIN/evaluate" --benchmark humaneval --data "$HE" --checkpoint "$1" --tokenizer "$TOK" --output evout "${d[@]}" \
    "${n[@]}" "${@:2}"; }
for prog in gen ev; do
  out=out.jsonl; [ $prog = ev ] && out=evout
  refused "$prog --max-new-tokens INT64_MAX" "--max-new-tokens 9223372036854775807" $out $prog model.h5 --max-new-tokens 9223372036854775807
  refused "$prog --max-new-tokens 257" "max_seq_len 256" $out $prog model.h5 --max-new-tokens 257
  refused "$prog --speculative 4" "--speculative 4: model.h5 has n_future 3" $out $prog model.h5 --speculative 4
done
# A model vocabulary smaller than the tokenizer's is refused; a padded one (model.h5 with 88 output
# rows more, large: make_tiny_model.py PAD) decodes over the tokenizer's 512 ids, as model.h5 does.
"${WMTP_PYTHON:?}" "$SRC/tests/eval/make_tiny_model.py" meta400 400 4 &&
  "$BIN/convert-checkpoint" import --from meta --input meta400/model.safetensors --output model400.h5 > /dev/null &&
  "${WMTP_PYTHON:?}" "$SRC/tests/eval/make_tiny_model.py" meta600 512 4 88 &&
  "$BIN/convert-checkpoint" import --from meta --input meta600/model.safetensors --output model600.h5 > /dev/null ||
  bad "cannot make the 400-id and the padded 600-id models"
refused "generate, 400-id model, 512-id tokenizer" "vocabulary has 400 ids" out.jsonl gen model400.h5
refused "evaluate, 400-id model, 512-id tokenizer" "vocabulary has 400 ids" evout ev model.h5 --checkpoint model400.h5
printf '%s\n' '{"id": "p0", "prompt": "def add(a, b):"}' '{"id": "p1", "prompt": "Once upon a time"}' \
  '{"id": "p2", "prompt": "x"}' > padded_prompts.jsonl
for flags in "--speculative 1" "--speculative 3" "--speculative 3 --temperature 0.8 --top-p 0.95 --num-samples 2"; do
  gen_both() { "$BIN/generate" --checkpoint "$1" --tokenizer "$TOK" --prompts padded_prompts.jsonl --output "$2" \
    --max-new-tokens 24 --batch-size 2 $flags > "$2.log" 2>&1; }
  if gen_both model.h5 unpadded.jsonl && gen_both model600.h5 padded.jsonl && [ -s padded.jsonl ] &&
     grep -q "ids from 512 on (padding) are never drafted nor sampled" padded.jsonl.log &&
     cmp -s unpadded.jsonl padded.jsonl; then ok "generate $flags: the padded 600-id model gives model.h5's output"
  else bad "generate $flags: padded vs unpadded: $(tail -2 padded.jsonl.log; diff unpadded.jsonl padded.jsonl | head -4)"; fi
done
# A trained checkpoint records the fingerprint of its data's tokenizer (the tiny one, $TOK's).
"$BIN/train-baseline" -c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5" \
  --set lora.enabled=false --set training.max_steps=1 --set checkpoint.every=1 --set training.run_dir=trained \
  --set checkpoint.dir=trained/ckpt --set logging.tensorboard=false > train.log 2>&1 || bad "train-baseline: $(tail -3 train.log)"
trained=trained/ckpt/$(cat trained/ckpt/latest 2> /dev/null)
python3 - "$trained" other_tokenizer.h5 <<'PY' || bad "no tokenizer fingerprint in the trained checkpoint"
import re, sys
data = open(sys.argv[1], "rb").read()
fps = set(re.findall(rb"fnv1a64:[0-9a-f]{16}", data))
assert len(fps) == 1, fps
open(sys.argv[2], "wb").write(data.replace(fps.pop(), b"fnv1a64:0123456789abcdef"))
PY
gen "$trained" > trained_gen.log 2>&1 && [ -s out.jsonl ] && ! grep -q "records no tokenizer" trained_gen.log &&
  ok "generate with the tokenizer the checkpoint records: exit 0" || bad "generate with the right tokenizer: $(tail -3 trained_gen.log)"
rm -f out.jsonl
refused "generate, another tokenizer's checkpoint" "tokenized by fnv1a64:0123456789abcdef" out.jsonl gen other_tokenizer.h5
refused "evaluate, another tokenizer's checkpoint" "tokenized by fnv1a64:0123456789abcdef" evout ev other_tokenizer.h5
gen model.h5 > imported_gen.log 2>&1 && grep -q "records no tokenizer fingerprint" imported_gen.log &&
  ok "imported weights: generated, with a warning that the tokenizer was checked by size only" ||
  bad "imported weights: $(tail -3 imported_gen.log)"
rm -f out.jsonl

# 3. Benchmark rows (the checkpoint is missing: the file is read and refused first).
bench_refused() {  # bench_refused NAME BENCHMARK NEEDLE ROW...
  local name=$1 bench=$2 needle=$3; shift 3
  printf '%s\n' "$@" > rows.jsonl
  refused "$name" "$needle" evout "$BIN/evaluate" --benchmark "$bench" --data rows.jsonl --checkpoint nowhere.h5 \
    --tokenizer "$TOK" --output evout
}
good_mbpp='{"task_id": 1, "text": "t", "test_list": ["assert True"], "test_setup_code": ""}'
bench_refused "MBPP test_list []" mbpp "rows.jsonl:2: \"test_list\" must be a non-empty list" "$good_mbpp" \
  '{"task_id": 2, "text": "t", "test_list": [], "test_setup_code": ""}'
bench_refused "MBPP test_setup_code 5" mbpp "rows.jsonl:1: \"test_setup_code\" must be a string" \
  '{"task_id": 2, "text": "t", "test_list": ["assert True"], "test_setup_code": 5}'
bench_refused "GSM8K answer without a number" gsm8k "rows.jsonl:2: \"answer\": no number" \
  '{"question": "q", "answer": "#### 4"}' '{"question": "q", "answer": "none"}'
bench_refused "GSM8K answer of 400 digits" gsm8k "rows.jsonl:1: \"answer\": its number (400 characters" \
  "{\"question\": \"q\", \"answer\": \"#### $(printf '9%.0s' $(seq 400))\"}"

# 4. evaluate's checkpoints and its output directory.
ev model.h5 --checkpoint nowhere.h5 > missing.log 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q "nowhere.h5" missing.log && ! grep -q "pass@1" missing.log && [ ! -e evout/model/tasks.csv ]; then
  ok "a missing second checkpoint: exit 2 before the first is evaluated"
else bad "a missing second checkpoint: exit $rc, $(grep -c 'pass@1' missing.log) result line(s): $(tail -2 missing.log)"; fi
rm -rf evout
# A weight of the second checkpoint corrupted (its checksum fails when it loads, after the first
# checkpoint's results are written): the summary of an earlier complete run must not stay.
cp model.h5 corrupt.h5
off=$(h5dump -p -H -d /model/norm.weight corrupt.h5 | sed -n 's/.*OFFSET \([0-9]*\).*/\1/p')
[ -n "$off" ] && printf '\x11\x22\x33\x44' | dd of=corrupt.h5 bs=1 seek="$off" conv=notrunc status=none || bad "cannot corrupt"
ev model.h5 --num-samples 2 > run1.log 2>&1 || bad "first evaluation: $(tail -3 run1.log)"
ev model.h5 --checkpoint corrupt.h5 --num-samples 3 > run2.log 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q "checksum" run2.log && [ ! -e evout/summary.json ] &&
   python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["num_samples"] == 3' evout/model/summary.json; then
  ok "a failed run leaves no earlier OUTPUT/summary.json"
else bad "failed run (exit $rc): summary.json $([ -e evout/summary.json ] && cat evout/summary.json)"; tail -3 run2.log; fi
rm -rf evout
touch blocked
refused "evaluate, an MLflow file store it cannot write" "--mlflow-uri" evout/model/tasks.csv ev model.h5 \
  --mlflow-uri "file://$PWD/blocked/mlruns"
rm -rf evout
mkdir -p a b c && cp model.h5 a/step.h5 && cp model.h5 b/step.h5 && cp model.h5 c/step_1.h5
ev a/step.h5 --checkpoint b/step.h5 --checkpoint c/step_1.h5 --max-tasks 1 > names.log 2>&1 || bad "three checkpoints: $(tail -3 names.log)"
python3 - evout <<'PY' && ok "a/step.h5, b/step.h5, c/step_1.h5: three result directories" || bad "result directories collide"
import json, os, sys
d = sys.argv[1]
got = {json.load(open(f"{d}/{n}/summary.json"))["checkpoint"]: n for n in os.listdir(d) if os.path.isdir(f"{d}/{n}")}
assert sorted(got) == ["a/step.h5", "b/step.h5", "c/step_1.h5"], got
assert got["c/step_1.h5"] == "step_1" and got["a/step.h5"] == "step", got
assert [s["checkpoint"] for s in json.load(open(f"{d}/summary.json"))] == ["a/step.h5", "b/step.h5", "c/step_1.h5"]
PY
eval_finish
