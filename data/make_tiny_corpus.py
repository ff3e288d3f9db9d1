#!/usr/bin/env python3
"""Generate the bundled tiny corpus (data/tiny/{train,valid}.jsonl), the tokenizer training text, and
two MBPP-format task files for `make demo`'s pass@1 (docs/evaluate.md): data/tiny/tasks_mbpp.jsonl
(held out: prompts no training sample has) and data/tiny/tasks_mbpp_seen.jsonl (the training split's
own prompts). tests/eval/test_tiny_tasks.sh checks that this script reproduces all five files.

Problems with correct and incorrect Python solutions and difficulties, in the weighted_mtp JSONL
schema (docs/data.md, "Input"), small enough to commit and to train on in tests. Only the
standard library; fully deterministic (fixed seed, no dict/set ordering that depends on hashing), so
re-running it reproduces the committed files byte for byte.

Usage: python3 data/make_tiny_corpus.py [OUT_DIR]   (default: data/tiny next to this script)
       python3 data/make_tiny_corpus.py --problems N OUT_DIR
The second form writes only train.jsonl and valid.jsonl, for the generation bench's model
(bench/train-generate-model.sh): the bundled splits, and N more training problems of the same families
(function numbers from 120 on, skipping the held-out tasks' 900..999) less those whose instruction is a
prompt of data/tiny/tasks_mbpp.jsonl, so the held-out tasks stay held out and the seen ones seen. Tokenize
it with the bundled corpus's tokenizer (data/make_tokenizer.sh), as the tasks are.
"""
import argparse
import json
import os
import random
import sys

SEED = 20240611

# Each family: (name, instruction template, list of correct bodies, list of incorrect bodies).
# Bodies are templates over the problem's parameters {f} (function name) and {k} (a constant).
FAMILIES = [
    ("add_const", "Write a Python function {f}(x) that returns x plus {k}.",
     ["def {f}(x):\n    return x + {k}\n",
      "def {f}(x):\n    result = x\n    result += {k}\n    return result\n",
      "{f} = lambda x: x + {k}\n"],
     ["def {f}(x):\n    return x - {k}\n",
      "def {f}(x):\n    return x + {k} + 1\n",
      "def {f}(x):\n    x + {k}\n"]),
    ("mul_const", "Write a Python function {f}(x) that returns x multiplied by {k}.",
     ["def {f}(x):\n    return x * {k}\n",
      "def {f}(x):\n    total = 0\n    for _ in range({k}):\n        total += x\n    return total\n"],
     ["def {f}(x):\n    return x ** {k}\n",
      "def {f}(x):\n    return x * ({k} - 1)\n"]),
    ("sum_list", "Given a list of integers, return the sum of the elements that are divisible by {k}.",
     ["def {f}(xs):\n    return sum(x for x in xs if x % {k} == 0)\n",
      "def {f}(xs):\n    s = 0\n    for x in xs:\n        if x % {k} == 0:\n            s += x\n    return s\n"],
     ["def {f}(xs):\n    return sum(x for x in xs if x % {k})\n",
      "def {f}(xs):\n    s = 0\n    for x in xs[1:]:\n        if x % {k} == 0:\n            s += x\n    return s\n",
      "def {f}(xs):\n    return len([x for x in xs if x % {k} == 0])\n"]),
    ("count_char", "Count how many times the character '{c}' occurs in the string s.",
     ["def {f}(s):\n    return s.count('{c}')\n",
      "def {f}(s):\n    n = 0\n    for ch in s:\n        if ch == '{c}':\n            n += 1\n    return n\n"],
     ["def {f}(s):\n    return s.find('{c}')\n",
      "def {f}(s):\n    n = 0\n    for ch in s:\n        if ch != '{c}':\n            n += 1\n    return n\n"]),
    ("max_window", "Return the largest sum of {k} consecutive elements of the list xs (len(xs) >= {k}).",
     ["def {f}(xs):\n    best = sum(xs[:{k}])\n    cur = best\n    for i in range({k}, len(xs)):\n"
      "        cur += xs[i] - xs[i - {k}]\n        best = max(best, cur)\n    return best\n",
      "def {f}(xs):\n    return max(sum(xs[i:i + {k}]) for i in range(len(xs) - {k} + 1))\n"],
     ["def {f}(xs):\n    return max(sum(xs[i:i + {k}]) for i in range(len(xs) - {k}))\n",
      "def {f}(xs):\n    return sum(sorted(xs)[-{k}:])\n"]),
    ("fib_mod", "Return the n-th Fibonacci number modulo {k} (fib(0) = 0, fib(1) = 1).",
     ["def {f}(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, (a + b) % {k}\n    return a\n",
      "def {f}(n):\n    if n < 2:\n        return n % {k}\n    prev, cur = 0, 1\n    for _ in range(n - 1):\n"
      "        prev, cur = cur, (prev + cur) % {k}\n    return cur\n"],
     ["def {f}(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
      "def {f}(n):\n    a, b = 1, 1\n    for _ in range(n):\n        a, b = b, (a + b) % {k}\n    return a\n"]),
    ("is_multiple", "Read an integer n from standard input and print YES if n is a multiple of {k}, otherwise NO.",
     ["n = int(input())\nprint('YES' if n % {k} == 0 else 'NO')\n",
      "import sys\nn = int(sys.stdin.readline())\nif n % {k}:\n    print('NO')\nelse:\n    print('YES')\n"],
     ["n = int(input())\nprint('YES' if n % {k} else 'NO')\n",
      "n = input()\nprint('YES' if n % {k} == 0 else 'NO')\n"]),
    ("reverse_words", "Reverse the order of the words in the sentence s and join them with '{c}'.",
     ["def {f}(s):\n    return '{c}'.join(reversed(s.split()))\n",
      "def {f}(s):\n    words = s.split()\n    words.reverse()\n    return '{c}'.join(words)\n"],
     ["def {f}(s):\n    return '{c}'.join(s.split())\n",
      "def {f}(s):\n    return s[::-1]\n"]),
    ("clamp", "Clamp every value of the list xs into the range [0, {k}] and return the new list.",
     ["def {f}(xs):\n    return [min(max(x, 0), {k}) for x in xs]\n",
      "def {f}(xs):\n    out = []\n    for x in xs:\n        if x < 0:\n            x = 0\n        elif x > {k}:\n"
      "            x = {k}\n        out.append(x)\n    return out\n"],
     ["def {f}(xs):\n    return [max(min(x, 0), {k}) for x in xs]\n",
      "def {f}(xs):\n    return [min(x, {k}) for x in xs]\n"]),
    ("digit_sum", "Print the sum of the decimal digits of the non-negative integer read from input, times {k}.",
     ["n = input().strip()\nprint({k} * sum(int(d) for d in n))\n",
      "n = int(input())\ns = 0\nwhile n:\n    s += n % 10\n    n //= 10\nprint(s * {k})\n"],
     ["n = int(input())\ns = 0\nwhile n > 9:\n    s += n % 10\n    n //= 10\nprint(s * {k})\n",
      "n = input().strip()\nprint(sum(int(d) for d in n))\n"]),
]

CHARS = ["a", "e", "x", "z", "é", "-", "+", "ß"]  # a few non-ASCII ones exercise byte fallback
HELD_OUT_MAX_K = 12  # the corpus's constants are 2..9; held-out tasks may use up to this
HELD_OUT_FIRST, HELD_OUT_END = 900, 1000  # the held-out tasks' function numbers; no corpus uses them


def make_problem(rng, family, index, split, problems=None):
    name, instr, good, bad = family
    k = rng.randint(2, 9)
    c = CHARS[rng.randrange(len(CHARS))]
    if problems is not None:  # recorded for the seen tasks; draws nothing from rng
        problems.append((name, index, k, c))
    f = "solve_%s_%d" % (name, index)
    fmt = dict(f=f, k=k, c=c)
    problem_id = "%s_%s_%03d" % (split, name, index)
    # Difficulty mostly in [1, 25]; a few 0 / -1 (CodeContests' "unknown") and a few missing.
    roll = rng.random()
    if roll < 0.05:
        difficulty = None
    elif roll < 0.10:
        difficulty = rng.choice([0, -1])
    else:
        difficulty = rng.randint(1, 25)
    n_good = rng.randint(0, len(good) + 1)
    n_bad = rng.randint(0, len(bad) + 1)
    if n_good == 0 and n_bad == 0:
        n_good = 1
    use_input = rng.random() < 0.15
    samples = []
    for correct, bodies, n in ((True, good, n_good), (False, bad, n_bad)):
        for i in range(n):
            body = bodies[i % len(bodies)].format(**fmt)
            if i >= len(bodies):  # a second copy of a style, renamed so the text differs
                body = "# variant %d\n" % i + body
            meta = {"source": "tiny", "has_tests": bool(rng.random() < 0.5)}
            if difficulty is not None:
                meta["difficulty"] = difficulty
            samples.append({
                "instruction": instr.format(**fmt),
                "input": ("Example: %s(%d)" % (f, k)) if use_input else "",
                "output": body,
                "task_id": "%s_%s_%d" % (problem_id, "correct" if correct else "incorrect", i),
                "is_correct": correct,
                "metadata": meta,
            })
    return samples


def make_split(rng, split, n_problems, problems=None, first=0):
    lines = []
    for i in range(first, first + n_problems):
        family = FAMILIES[rng.randrange(len(FAMILIES))]
        index = i if i < HELD_OUT_FIRST else i + HELD_OUT_END - HELD_OUT_FIRST
        lines.extend(make_problem(rng, family, index, split, problems))
    # Interleave problems a little (files are rarely grouped perfectly), deterministically.
    rng.shuffle(lines)
    return lines


def write_jsonl(path, samples):
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for s in samples:
            fh.write(json.dumps(s, ensure_ascii=False, sort_keys=False) + "\n")


def tokenizer_text(samples):
    """Text for spm_train: the Alpaca template headers plus every instruction and solution line."""
    head_no = ("Below is an instruction that describes a task. Write a response that appropriately "
               "completes the request.")
    head_in = ("Below is an instruction that describes a task, paired with an input that provides further "
               "context. Write a response that appropriately completes the request.")
    out = [head_no, head_in, "### Instruction:", "### Input:", "### Response:"] * 20
    for s in samples:
        out.append(s["instruction"])
        if s["input"]:
            out.append(s["input"])
        out.extend(line for line in s["output"].split("\n") if line)
    return "\n".join(out) + "\n"


# Reference solutions of the function families, for the held-out tasks' expected values.
REFERENCE = {
    "add_const": lambda k, c: (lambda x: x + k),
    "mul_const": lambda k, c: (lambda x: x * k),
    "sum_list": lambda k, c: (lambda xs: sum(x for x in xs if x % k == 0)),
    "count_char": lambda k, c: (lambda s: s.count(c)),
    "max_window": lambda k, c: (lambda xs: max(sum(xs[i:i + k]) for i in range(len(xs) - k + 1))),
    "fib_mod": lambda k, c: (lambda n: _fib_mod(n, k)),
    "reverse_words": lambda k, c: (lambda s: c.join(reversed(s.split()))),
    "clamp": lambda k, c: (lambda xs: [min(max(x, 0), k) for x in xs]),
}


def _fib_mod(n, k):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (a + b) % k
    return a


def _arg(rng, family, c):
    if family in ("add_const", "mul_const", "fib_mod"):
        return rng.randint(0, 30)
    if family in ("count_char", "reverse_words"):
        letters = "abcxyze" + (c * 3 if family == "count_char" else "")  # so that counting c is tested
        words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(1, 4))]
        return " ".join(words)
    shortest = HELD_OUT_MAX_K + 1 if family == "max_window" else 9  # every window size fits
    return [rng.randint(-9, 20) for _ in range(rng.randint(shortest, shortest + 3))]


# Most instructions do not name the function, and no prompt states the problem number its name ends with,
# so those tasks' asserts call whichever solve_<family>_* function the completion defined (a real MBPP
# prompt does not name the function either, but there it is the benchmark's own known weakness).
FIND_FUNCTION = """def solution(*args):
    found = [v for n, v in list(globals().items()) if n.startswith(%r) and callable(v)]
    return found[-1](*args)
"""


def _alternatives(name, k, c):
    """The family's solutions with another constant: what a model that ignores the prompt's constant writes."""
    if name in ("count_char", "reverse_words"):
        return [REFERENCE[name](k, c2) for c2 in CHARS if c2 != c]
    return [REFERENCE[name](k2, c) for k2 in range(2, HELD_OUT_MAX_K + 1) if k2 != k]


def make_task(rng, family, index, k, c):
    """One instance of a function family in MBPP's format {task_id, text, code, test_list, test_setup_code}:
    asserts on arguments drawn from rng, expected values from REFERENCE; at least three, more (at most 30)
    until every solution of the family with another constant fails one (fib mod 2 and mod 4 agree on
    many n, for example)."""
    name, instr, good, _ = family
    f = "solve_%s_%d" % (name, index)
    named = "{f}" in instr
    ref = REFERENCE[name](k, c)
    others = _alternatives(name, k, c)
    tests = []
    while len(tests) < 3 or (others and len(tests) < 30):
        x = _arg(rng, name, c)
        others = [g for g in others if g(x) == ref(x)]
        tests.append("assert %s(%r) == %r" % (f if named else "solution", x, ref(x)))
    if others:
        raise SystemExit("task %s: 30 asserts do not tell its constant from the others" % f)
    return {"task_id": "tiny/%s_%d" % (name, index), "text": instr.format(f=f, k=k, c=c),
            "code": good[0].format(f=f, k=k, c=c), "test_list": tests,
            "test_setup_code": "" if named else FIND_FUNCTION % ("solve_%s_" % name)}


def make_tasks(rng, per_family, train):
    """Held-out instances of the function families: function names the corpus never uses, and prompts no
    training sample has. Most instructions do not name the function and take one of eight constants, so
    most were used in training: those families draw their constant from 2..12 (the corpus: 2..9) until
    the instruction is new. The stdin families have no function to assert on."""
    trained = set(s["instruction"] for s in train)
    tasks = []
    for family in FAMILIES:
        name, instr = family[0], family[1]
        if name not in REFERENCE:
            continue
        for j in range(per_family):
            index = HELD_OUT_FIRST + j  # the bundled corpus names its functions 0..119
            while True:
                k = rng.randint(2, HELD_OUT_MAX_K)
                c = CHARS[rng.randrange(len(CHARS))]
                if instr.format(f="solve_%s_%d" % (name, index), k=k, c=c) not in trained:
                    break
            tasks.append(make_task(rng, family, index, k, c))
    return tasks


def make_seen_tasks(rng, problems, train):
    """The training split's own function problems as MBPP tasks: the same instruction, function name and
    constants as in train.jsonl, new asserts. Only problems whose prompt MBPP's template reproduces (no
    "input") and that have both a correct and an incorrect solution: the only ones whose correct solutions
    the demo's pair selection trains on."""
    kinds = {}
    for s in train:
        problem = s["task_id"].rsplit("_", 2)[0]
        kinds.setdefault(problem, set()).add("input" if s["input"] else s["is_correct"])
    by_name = {family[0]: family for family in FAMILIES}
    tasks = []
    for name, index, k, c in problems:
        problem = "train_%s_%03d" % (name, index)
        if name in REFERENCE and kinds.get(problem) == {True, False}:
            task = make_task(rng, by_name[name], index, k, c)
            task["task_id"] = "tiny/seen/%s_%d" % (name, index)
            tasks.append(task)
    return tasks


def write_larger_corpus(out_dir, n_problems, tasks_path):
    """train.jsonl: the bundled training split plus n_problems more problems, less those whose instruction is a
    held-out task's prompt (a few: the character families have eight prompts each); valid.jsonl: the bundled
    validation split. The seen tasks stay seen and the held-out ones held out."""
    rng = random.Random(SEED)
    train = make_split(rng, "train", 120)  # the bundled splits, as main() makes them
    valid = make_split(rng, "valid", 30)
    with open(tasks_path, encoding="utf-8") as fh:
        held_out = set(json.loads(line)["text"] for line in fh)
    more = make_split(random.Random(SEED + 3), "more", n_problems, first=120)
    kept = [s for s in more if s["instruction"] not in held_out]
    write_jsonl(os.path.join(out_dir, "train.jsonl"), train + kept)
    write_jsonl(os.path.join(out_dir, "valid.jsonl"), valid)
    print("train: the bundled %d samples and %d problems more (%d samples; %d more dropped: a prompt of %s), "
          "valid: the bundled %d -> %s" % (len(train), n_problems, len(kept), len(more) - len(kept), tasks_path,
                                           len(valid), out_dir))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=os.path.join(here, "tiny"))
    ap.add_argument("--problems", type=int, default=0,
                    help="write only train/valid: the bundled splits and this many training problems more "
                         "(the generation bench's corpus)")
    args = ap.parse_args()
    out_dir = args.out_dir
    os.makedirs(out_dir, exist_ok=True)
    if args.problems > 0:
        write_larger_corpus(out_dir, args.problems, os.path.join(here, "tiny", "tasks_mbpp.jsonl"))
        return
    rng = random.Random(SEED)
    problems = []
    train = make_split(rng, "train", 120, problems)
    valid = make_split(rng, "valid", 30)
    write_jsonl(os.path.join(out_dir, "train.jsonl"), train)
    write_jsonl(os.path.join(out_dir, "valid.jsonl"), valid)
    with open(os.path.join(out_dir, "tokenizer.txt"), "w", encoding="utf-8", newline="\n") as fh:
        fh.write(tokenizer_text(train + valid))
    tasks = make_tasks(random.Random(SEED + 1), 3, train)  # its own stream: the corpus stays byte for byte
    write_jsonl(os.path.join(out_dir, "tasks_mbpp.jsonl"), tasks)
    seen = make_seen_tasks(random.Random(SEED + 2), problems, train)
    write_jsonl(os.path.join(out_dir, "tasks_mbpp_seen.jsonl"), seen)
    print("train: %d samples, valid: %d samples, %d held-out tasks, %d seen tasks -> %s"
          % (len(train), len(valid), len(tasks), len(seen), out_dir))


if __name__ == "__main__":
    main()
