#!/usr/bin/env bash
# bin/evaluate end to end on a random tiny model and three HumanEval-format tasks (one that passes
# whatever the completion, one that never does, one real): two checkpoints compared in one run, the
# per-task CSV, samples and summaries written, pass@1 exactly 1/3, and the same files at 1 and 2 ranks;
# then a task's samples decoded in batches with the heads (--speculative 3: the same files at batch
# 4 and 1, np 2 and 1) beside a task whose prompt is longer than the model's context (warned once,
# counted in the summary).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/eval_lib.sh"
eval_setup evaluate_cli 4
cp model.h5 a.h5 && cp model.h5 b.h5 || exit 1
ev() { local np=$1 out=$2
  $MPI -np "$np" "$BIN/evaluate" --benchmark humaneval --data "$SRC/tests/eval/data/humaneval_tiny.jsonl" \
    --checkpoint a.h5 --checkpoint b.h5 --tokenizer "$TOK" --output "$out" --num-samples 4 --max-new-tokens 16 \
    --temperature 0.8 --python python3 > "$out.log" 2>&1; }
ev 1 np1 || bad "evaluate np 1 failed: $(tail -3 np1.log)"
ev 2 np2 || bad "evaluate np 2 failed: $(tail -3 np2.log)"
grep -q "network + PID + mount namespaces" np1.log && ok "the log names the isolation" || bad "isolation not logged"
# --allow-unisolated's help names everything the sandbox gives up and keeps without namespaces.
help=$("$BIN/evaluate" --help 2>&1 | tr -s ' \n' ' ')
missing=""
for w in "network, PID, IPC and mount namespaces" "read-only root" "setsid()" "uid 65534 unless run as root" \
         "seccomp filter where the kernel refuses it" "clean environment" "no_new_privs"; do
  grep -qF "$w" <<<"$help" || missing+=" '$w'"
done
[ -z "$missing" ] && ok "--allow-unisolated's help: what is given up and kept" || bad "--allow-unisolated's help lacks$missing"
# The same files at 1 and 2 ranks; summary.json's generate_seconds (a timing) is the one field left out.
same_summary() { python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a.pop("generate_seconds") >= 0 and b.pop("generate_seconds") >= 0
assert a == b, (a, b)
PY
}
for run in a b; do
  for f in tasks.csv samples.jsonl; do
    cmp -s "np1/$run/$f" "np2/$run/$f" && ok "$run/$f: np 2 = np 1" || bad "$run/$f differs between np 1 and np 2"
  done
  same_summary "np1/$run/summary.json" "np2/$run/summary.json" && ok "$run/summary.json: np 2 = np 1 (timing aside)" ||
    bad "$run/summary.json differs between np 1 and np 2"
done
python3 - np1 <<'PY' && ok "pass@1 = 1/3, CSV rows, 12 samples, TensorBoard events, summary of both checkpoints" || bad "results wrong"
import csv, json, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/a/tasks.csv")))
assert [r["task_id"] for r in rows] == ["tiny/always", "tiny/never", "tiny/add"], rows
assert rows[0]["correct"] == "4" and rows[1]["correct"] == "0", rows
s = json.load(open(f"{d}/a/summary.json"))
assert s["tasks"] == 3 and s["num_samples"] == 4 and "pass@5" not in s, s
assert abs(s["pass@1"] - (4 + int(rows[2]["correct"])) / 12) < 1e-12, s
assert len(open(f"{d}/a/samples.jsonl").readlines()) == 12
allsum = json.load(open(f"{d}/summary.json"))
import glob
assert glob.glob(f"{d}/a/tensorboard/events.out.tfevents.*"), "no TensorBoard events"
assert [x["checkpoint"] for x in allsum] == ["a.h5", "b.h5"], allsum
PY
# A task's samples batched with the heads, and a prompt over the context (max_seq_len 256).
python3 - "$SRC/tests/eval/data/humaneval_tiny.jsonl" > with_long.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows.insert(1, {"task_id": "tiny/long", "prompt": "def long():\n" + "".join(f"    x{i} = {i}\n" for i in range(300)),
                "test": "def check(f):\n    assert True\n", "entry_point": "long"})
for r in rows: print(json.dumps(r))
PY
evs() { local np=$1 out=$2; shift 2
  $MPI -np "$np" "$BIN/evaluate" --benchmark humaneval --data with_long.jsonl --checkpoint a.h5 --tokenizer "$TOK" \
    --output "$out" --num-samples 4 --max-new-tokens 16 --temperature 0.8 --speculative 3 --python python3 \
    --tensorboard false "$@" > "$out.log" 2>&1; }
evs 1 spec_b1 --batch-size 1 || bad "evaluate --speculative 3 --batch-size 1 failed: $(tail -3 spec_b1.log)"
evs 2 spec_b4 --batch-size 4 || bad "evaluate --speculative 3 --batch-size 4 failed: $(tail -3 spec_b4.log)"
# The completions and the decoding statistics (the verdicts come from the sandbox, tested above).
python3 - spec_b1/a spec_b4/a <<'PY' && ok "speculative completions and statistics: batch 4 np 2 = batch 1 np 1" ||
import json, sys
def load(d):
    s = json.load(open(f"{d}/summary.json"))
    rows = [json.loads(l) for l in open(f"{d}/samples.jsonl")]
    return ([(r["task_id"], r["sample"], r["completion"], r["finish_reason"]) for r in rows],
            {k: s[k] for k in ("tokens_per_forward", "draft_acceptance_per_head", "tasks_cut_by_context")})
a, b = load(sys.argv[1]), load(sys.argv[2])
assert len(a[0]) == 16 and a == b, (a, b)
PY
  bad "speculative completions or statistics differ by batch size and rank count"
[ "$(grep -c "1 of 4 tasks' prompts are longer than the model's context" spec_b4.log)" = 1 ] &&
  ok "over-context task: one warning" || bad "no single over-context warning: $(grep -i context spec_b4.log)"
python3 - spec_b4/a/summary.json <<'PY' && ok "summary: tasks_cut_by_context 1, speculative statistics" || bad "summary wrong"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["tasks"] == 4 and s["tasks_cut_by_context"] == 1 and s["speculative"] == 3, s
assert len(s["draft_acceptance_per_head"]) == 2 and s["tokens_per_forward"] >= 1.0, s
PY
eval_finish
