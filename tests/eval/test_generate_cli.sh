#!/usr/bin/env bash
# bin/generate end to end on a random tiny model: the same file at 1, 2 and 3 ranks (greedy and
# sampled, 60 prompts of different lengths, decoded 8 at a time by default) and with --batch-size 1
# and 5, self-speculative greedy equal to plain greedy, lines in input order with every field, and
# usage errors for a K outside [1, n_future] and a batch size of 0.
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
  $MPI -np "$np" "$BIN/generate" --checkpoint model.h5 --tokenizer "$TOK" --prompts prompts.jsonl --output "$out" \
    --max-new-tokens 12 "$@" > "$out.log" 2>&1; }
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
eval_finish
