#!/usr/bin/env bash
# bin/generate end to end on a random tiny model: the same file at 1, 2 and 3 ranks (greedy and
# sampled, 60 prompts of different lengths, decoded 8 at a time by default) and with --batch-size 1
# and 5, plain and self-speculative (greedy speculative equal to plain greedy; sampled speculative
# the same at every batch size and rank count), lines in input order with every field, usage errors
# for a K outside [1, n_future] and a batch size of 0; a prompt longer than the model's context
# (warned, counted, an empty completion); and a trillion samples streamed to the output's temporary
# in bounded memory, with nothing under the output's name until the run ends.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/eval_lib.sh"
eval_setup generate_cli 3
python3 - "$SRC/data/tiny/valid.jsonl" > prompts.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for i in range(60):
    r = rows[i % len(rows)]
    print(json.dumps({"id": f"p{i}", "prompt": r["instruction"][: 20 + (i * 7) % 80]}))
PY
gen() { local np=$1 out=$2; shift 2
  $MPI -np "$np" "$BIN/generate" --checkpoint model.h5 --tokenizer "$TOK" --prompts "${PROMPTS:-prompts.jsonl}" \
    --output "$out" --max-new-tokens 12 "$@" > "$out.log" 2>&1; }
for np in 1 2 3; do gen $np greedy_np$np.jsonl || bad "generate greedy np $np failed: $(tail -3 greedy_np$np.jsonl.log)"; done
for np in 2 3; do
  cmp -s greedy_np1.jsonl greedy_np$np.jsonl && ok "greedy np $np = np 1" || bad "greedy np $np differs from np 1"
done
gen 1 sampled_np1.jsonl --temperature 0.8 --top-p 0.9 --num-samples 2 --seed 5 || bad "sampled np 1 failed"
gen 3 sampled_np3.jsonl --temperature 0.8 --top-p 0.9 --num-samples 2 --seed 5 || bad "sampled np 3 failed"
cmp -s sampled_np1.jsonl sampled_np3.jsonl && ok "sampled np 3 = np 1" || bad "sampled np 3 differs from np 1"
for b in 1 5; do
  gen 1 greedy_b$b.jsonl --batch-size $b || bad "greedy --batch-size $b failed: $(tail -3 greedy_b$b.jsonl.log)"
  cmp -s greedy_np1.jsonl greedy_b$b.jsonl && ok "greedy --batch-size $b = batch 8" || bad "greedy --batch-size $b differs from batch 8"
done
gen 2 sampled_b1.jsonl --temperature 0.8 --top-p 0.9 --num-samples 2 --seed 5 --batch-size 1 || bad "sampled batch 1 failed"
cmp -s sampled_np1.jsonl sampled_b1.jsonl && ok "sampled --batch-size 1 = batch 8" || bad "sampled --batch-size 1 differs"
gen 2 spec.jsonl --speculative 3 || bad "speculative failed: $(tail -3 spec.jsonl.log)"
cmp -s greedy_np1.jsonl spec.jsonl && ok "speculative K=3 greedy = plain greedy" || bad "speculative greedy differs"
for run in "3 spec_np3.jsonl --speculative 3" "1 spec_b1.jsonl --speculative 3 --batch-size 1" \
           "2 spec_b5.jsonl --speculative 2 --batch-size 5"; do
  set -- $run; out=$2
  gen "$@" || bad "$out failed: $(tail -3 $out.log)"
  cmp -s greedy_np1.jsonl "$out" && ok "$out (greedy, speculative) = plain greedy" || bad "$out differs from plain greedy"
done
sampled_spec() { gen "$@" --temperature 0.8 --top-p 0.9 --num-samples 2 --seed 5; }
sampled_spec 1 sspec_b1.jsonl --speculative 3 --batch-size 1 || bad "sampled speculative batch 1 failed"
sampled_spec 3 sspec_np3.jsonl --speculative 3 || bad "sampled speculative np 3 failed"
sampled_spec 2 sspec_b5.jsonl --speculative 3 --batch-size 5 || bad "sampled speculative batch 5 failed"
for f in sspec_np3.jsonl sspec_b5.jsonl; do
  cmp -s sspec_b1.jsonl $f && ok "$f (sampled, speculative) = batch 1, np 1" || bad "$f differs from sampled speculative batch 1"
done
grep -q "tokens per forward" spec.jsonl.log && grep -q "head 2 drafts" spec.jsonl.log && ok "speculative statistics logged" ||
  bad "no speculative statistics in the log"
python3 - greedy_np1.jsonl sampled_np1.jsonl <<'PY' && ok "60 prompts in order, every field" || bad "output lines malformed"
import json, sys
g = [json.loads(l) for l in open(sys.argv[1])]
s = [json.loads(l) for l in open(sys.argv[2])]
assert [r["id"] for r in g] == [f"p{i}" for i in range(60)], "ids out of order"
assert [(r["id"], r["sample"]) for r in s] == [(f"p{i}", k) for i in range(60) for k in range(2)]
for r in g + s:
    assert isinstance(r["text"], str) and isinstance(r["tokens"], list) and r["finish_reason"] in ("eos", "stop", "length")
    assert r["finish_reason"] != "length" or len(r["tokens"]) == 12
assert len({r["text"] for r in s}) > 60, "samples barely differ: not sampling"
PY
gen 1 bad.jsonl --speculative 4; rc=$?
[ "$rc" = 2 ] && ok "--speculative 4 > n_future: exit 2" || bad "--speculative 4 exited $rc"
gen 1 bad.jsonl --batch-size 0; rc=$?
[ "$rc" = 2 ] && ok "--batch-size 0: exit 2" || bad "--batch-size 0 exited $rc"
# A prompt longer than the model's context (max_seq_len 256): warned once with the count, an empty line.
python3 - > long.jsonl <<'PY'
import json
print(json.dumps({"id": "short", "prompt": "Write a function."}))
print(json.dumps({"id": "long", "prompt": " ".join(f"word{i}" for i in range(400))}))
print(json.dumps({"id": "short2", "prompt": "Add two numbers."}))
PY
PROMPTS=long.jsonl gen 2 long_out.jsonl --num-samples 2 || bad "generate with a long prompt failed: $(tail -3 long_out.jsonl.log)"
grep -q 'warn.*1 of 3 prompts are longer than the model.s context .*"long"' long_out.jsonl.log &&
  [ "$(grep -c 'longer than the model' long_out.jsonl.log)" = 1 ] && ok "over-context prompt: one warning with the count" ||
  bad "no single over-context warning: $(grep -i context long_out.jsonl.log)"
python3 - long_out.jsonl <<'PY' && ok "over-context prompt: empty completions, the others generated" || bad "long prompt's lines wrong"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in rows] == ["short", "short", "long", "long", "short2", "short2"], rows
for r in rows:
    assert (r["tokens"] == []) == (r["id"] == "long") and r["finish_reason"] in ("eos", "stop", "length"), r
PY
# Streaming: a trillion samples of 1 token; the output's temporary grows while each rank's peak RSS stays small.
$MPI -np 2 "$BIN/generate" --checkpoint model.h5 --tokenizer "$TOK" --prompts prompts.jsonl --output huge.jsonl \
  --max-new-tokens 1 --num-samples 1000000000000 > huge.log 2>&1 &
runner=$!
size=0
for _ in $(seq 1 1500); do
  size=$(stat -c %s huge.jsonl.tmp 2>/dev/null || echo 0)
  [ "$size" -gt 400000 ] && break
  kill -0 "$runner" 2>/dev/null || break
  sleep 0.2
done
peak=0  # kB, the largest VmHWM of the ranks (children of mpirun)
for p in $(pgrep -P "$runner"); do
  h=$(awk '/^VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
  [ "${h:-0}" -gt "$peak" ] && peak=$h
done
[ -e huge.jsonl ]; named=$?
kill "$runner" 2>/dev/null; wait "$runner" 2>/dev/null
[ "$size" -gt 400000 ] && [ "$peak" -gt 0 ] && [ "$peak" -lt 1500000 ] &&
  ok "a trillion samples: $size bytes streamed, peak RSS per rank $((peak / 1024)) MiB" ||
  bad "a trillion samples: $size bytes streamed, peak RSS per rank $((peak / 1024)) MiB (want > 400000 bytes, < 1465 MiB): $(tail -2 huge.log)"
[ "$named" != 0 ] && ok "nothing under --output's name while the run is unfinished" || bad "huge.jsonl exists mid-run"
rm -f huge.jsonl.tmp
eval_finish
