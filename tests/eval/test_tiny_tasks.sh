#!/usr/bin/env bash
# test_tiny_tasks: data/make_tiny_corpus.py reproduces every committed file of data/tiny byte for byte
# (the corpus is an input of the golden losses and of many tests; the task files are what make demo
# scores), and every bundled MBPP-format task is what its file says and scores what it should under
# MBPP's rule (setup code + completion + asserts; pass = no exception): a held-out task's prompt is no
# training sample's, a seen task's is a training prompt (one without an input); the reference solution
# passes; a completion that defines no function fails; so does the reference with any other constant of
# its family (what a model that ignores the prompt's constant writes); where the prompt does not name
# the function, the reference under another solve_<family>_<n> name passes (the asserts find it by family).
# And --problems, the generation bench's larger corpus, keeps the held-out tasks held out.
set -uo pipefail
SRC=${WMTP_SOURCE_DIR:?}
PY=${WMTP_PYTHON:?}
TMP=${WMTP_TEST_TMP_DIR:?}/test_tiny_tasks
rm -rf "$TMP"; mkdir -p "$TMP"
source "$SRC/tests/support/checks.sh"
"$PY" "$SRC/data/make_tiny_corpus.py" "$TMP" > /dev/null || { bad "make_tiny_corpus.py"; exit 1; }
for f in train.jsonl valid.jsonl tokenizer.txt tasks_mbpp.jsonl tasks_mbpp_seen.jsonl; do
  if cmp -s "$TMP/$f" "$SRC/data/tiny/$f"; then ok "$f reproduced byte for byte"
  else bad "$f: make_tiny_corpus.py writes something else than the committed file"; fi
done
# The task files: a line per file ("FAIL ..." per wrong check), one check here.
"$PY" - "$SRC/data/tiny" <<'PY' && ok "the task files score as they should" || bad "the task files (above)"
import json, re, sys

CHARS = ["a", "e", "x", "z", "é", "-", "+", "ß"]  # the corpus's characters (data/make_tiny_corpus.py)

def passes(task, completion):
    """MBPP's rule: setup code + completion + asserts run as one program; pass = no exception."""
    program = task["test_setup_code"] + "\n" + completion + "\n" + "".join(a + "\n" for a in task["test_list"])
    try:
        exec(compile(program, "solution.py", "exec"), {"__name__": "__main__"})
        return True
    except Exception:
        return False

def other_constants(task):
    """The reference with each other constant of its family: 2..12 for k (the first number >= 2 of the
    prompt), the other characters for c."""
    code = task["code"]
    quoted = re.search(r"'(.)'", code)
    if quoted:
        return [(repr(c), code.replace(quoted.group(0), repr(c))) for c in CHARS if c != quoted.group(1)]
    k = next(n for n in re.findall(r"(?<!\w)\d+(?!\w)", task["text"]) if int(n) >= 2)
    return [(str(k2), re.sub(r"(?<!\w)%s(?!\w)" % k, str(k2), code)) for k2 in range(2, 13) if str(k2) != k]

train = [json.loads(line) for line in open(f"{sys.argv[1]}/train.jsonl", encoding="utf-8")]
trained = set(s["instruction"] for s in train)
trained_without_input = set(s["instruction"] for s in train if not s["input"].strip())
bad = 0
for name, expected, seen in (("tasks_mbpp.jsonl", 24, False), ("tasks_mbpp_seen.jsonl", 45, True)):
    tasks = [json.loads(line) for line in open(f"{sys.argv[1]}/{name}", encoding="utf-8")]
    checks = []
    for t in tasks:
        code = t["code"]
        # seen: the prompt MBPP's template builds is a training prompt; held out: no training sample has it
        checks.append((t["task_id"] + " prompt in training", t["text"] in (trained_without_input if seen else trained), seen))
        checks.append((t["task_id"] + " reference passes", passes(t, code), True))
        checks.append((t["task_id"] + " no function passes", passes(t, "x = 1"), False))
        for constant, wrong in other_constants(t):
            checks.append((t["task_id"] + " the reference with the constant " + constant + " passes", passes(t, wrong), False))
        fn = re.match(r"def (solve_[a-z_]+_)(\d+)\(", code)
        if fn.group(0)[4:-1] not in t["text"]:  # the prompt does not name the function
            checks.append((t["task_id"] + " renamed passes", passes(t, code.replace(fn.group(0), "def %s7777(" % fn.group(1))), True))
    wrong = [c for c in checks if c[1] != c[2]]
    for c in wrong:
        print(f"FAIL {name}: {c[0]}: {c[1]} (expected {c[2]})")
    ok = len(tasks) == expected and not wrong
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {len(tasks)} tasks (expected {expected}), {len(checks)} scoring checks")
    bad += 0 if ok else 1
sys.exit(1 if bad else 0)
PY
# The generation bench's larger corpus (--problems): the bundled splits first, byte for byte, then more
# problems, none with a held-out prompt, none named like a held-out task's function (900..999).
"$PY" "$SRC/data/make_tiny_corpus.py" --problems 900 "$TMP/larger" > /dev/null || bad "make_tiny_corpus.py --problems"
"$PY" - "$SRC/data/tiny" "$TMP/larger" <<'PY' && ok "the larger corpus keeps the held-out tasks held out" || bad "the larger corpus (above)"
import json, re, sys
tiny, larger = sys.argv[1], sys.argv[2]
bundled = open(tiny + "/train.jsonl", encoding="utf-8").read()
train = open(larger + "/train.jsonl", encoding="utf-8").read()
held = [json.loads(l) for l in open(tiny + "/tasks_mbpp.jsonl", encoding="utf-8")]
more = [json.loads(l) for l in train[len(bundled):].splitlines()]
names = set(re.findall(r"solve_[a-z_]+_9\d\d\b", train))
clash = [s["instruction"] for s in more if s["instruction"] in {t["text"] for t in held}]
fails = [m for m, bad in (("train.jsonl does not start with the bundled split", not train.startswith(bundled)),
                          ("valid.jsonl is not the bundled one", open(larger + "/valid.jsonl", encoding="utf-8").read()
                           != open(tiny + "/valid.jsonl", encoding="utf-8").read()),
                          ("fewer than 500 samples more: %d" % len(more), len(more) < 500),
                          ("%d samples with a held-out prompt, e.g. %r" % (len(clash), clash[:1]), clash),
                          ("held-out function names in it: %s" % sorted(names)[:3], names)) if bad]
for m in fails:
    print("FAIL " + m)
sys.exit(1 if fails else 0)
PY
checks_finish
