#!/usr/bin/env bash
# bin/evaluate's sandbox end to end, on a random tiny model and HumanEval-format tasks whose hostile part
# is in the task's own test code (the completion sits in a raw string, so the model's output is moot):
#  1. evaluate killed mid-run (SIGTERM, SIGKILL; 1 and 2 ranks, every rank signalled as a scheduler does)
#     leaves no process of its programs (each execs into a marked sleeper and double-forks another into
#     a session of its own) and no sandbox directory in $TMPDIR;
#  2. an interpreter the sandbox cannot execute (missing, under the host's /tmp, in a directory uid 65534
#     may not enter) is exit 2 naming --python, before any generation; one in a virtual-environment-like
#     directory under a private (0700) parent runs;
#  3. tasks that cheat score 0: exiting with 0 before the tests run, reading the benchmark file named by
#     --data (found in the evaluator's command line through /proc), reading a token from the environment.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/eval_lib.sh"
eval_setup evaluate_sandbox 5

MARK="wmtp_orphan_$$"
# [_]: grep's own command line holds the pattern, not the marker
marked() { grep -l -s -a -- "wmtp_orphan[_]$$" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3; }
# Waits up to $1 s for no marked process; kills those left (by pid) and prints their count.
reap() { local n i; for ((i = 0; i < $1 * 10; i++)); do n=$(marked | wc -l); [ "$n" = 0 ] && break; sleep 0.1; done
  n=$(marked | wc -l); [ "$n" = 0 ] || kill -9 $(marked) 2>/dev/null; echo "$n"; }
task() {  # task ID PROMPT TEST ENTRY: a HumanEval row
  python3 -c 'import json, sys; print(json.dumps(dict(zip(["task_id", "prompt", "test", "entry_point"], sys.argv[1:]))))' "$@"
}
HOLD=$(cat <<PY
'''
import os, sys
argv = [sys.executable, '-c', 'import time; time.sleep(300)', '$MARK']
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, argv)
    os._exit(0)
os.execv(sys.executable, argv)
def check(f):
    pass
PY
)
{ task hold/0 "NOTE = r'''" "$HOLD" os; task hold/1 "NOTE = r'''" "$HOLD" os; } > hold.jsonl
common=(--benchmark humaneval --checkpoint model.h5 --tokenizer "$TOK" --num-samples 1 --max-new-tokens 4 --temperature 0)
ev() { local np=$1 out=$2; shift 2; $MPI -np "$np" "$BIN/evaluate" "${common[@]}" --output "$out" "$@"; }

# 1. Nothing outlives evaluate.
for np in 1 2; do
  for sig in TERM KILL; do
    what="np $np, SIGTERM/SIGKILL to every rank: SIG$sig"
    tmpd=$PWD/tmpdir_${np}_$sig; mkdir -p "$tmpd"
    TMPDIR=$tmpd $MPI -np "$np" "$BIN/evaluate" "${common[@]}" --output "kill_${np}_$sig" --data "$PWD/hold.jsonl" \
      --timeout 200 > "kill_${np}_$sig.log" 2>&1 &
    launcher=$!  # mpirun: the ranks are its children
    for ((i = 0; i < 1200; i++)); do [ "$(marked | wc -l)" -ge $((2 * np)) ] && break; sleep 0.1; done
    running=$(marked | wc -l)
    ranks=$(ps -o pid=,comm= --ppid "$launcher" | awk '$2 == "evaluate" {print $1}')
    [ "$running" -ge $((2 * np)) ] && [ -n "$ranks" ] || bad "$what: the programs never ran ($running marked, ranks '$ranks'): $(tail -3 "kill_${np}_$sig.log")"
    kill -"$sig" $ranks 2>/dev/null
    for ((i = 0; i < 300; i++)); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$launcher" 2>/dev/null; wait "$launcher" 2>/dev/null
    left=$(reap 10)
    scratch=$(find "$tmpd" -maxdepth 1 -name 'wmtp-sandbox-*' | wc -l)
    echo "     $what: $running marked processes before, $left after 10 s, $scratch sandbox directories left"
    [ "$left" = 0 ] && ok "$what: no program outlived evaluate" || bad "$what: $left program processes outlived evaluate"
    [ "$scratch" = 0 ] && ok "$what: no sandbox directory left in \$TMPDIR" || bad "$what: $scratch sandbox directories left in \$TMPDIR"
  done
done

# 2. The interpreter is tried in the sandbox before anything else.
real_py=/usr/bin/python3
[ -x "$real_py" ] || real_py=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')
host_tmp=$(mktemp -d /tmp/wmtp-evaluate-sandbox.XXXXXX) || exit 1
# The venv-like prefix must lie outside /tmp, /var/tmp and /dev/shm, which the sandbox never binds:
# under this test's scratch, or under $HOME when the build tree itself is there (a checkout in /tmp).
venv_root=$PWD; home_tmp=""
case "$PWD/" in
  /tmp/* | /var/tmp/* | /dev/shm/*) home_tmp=$(mktemp -d "$HOME/.wmtp-evaluate-sandbox.XXXXXX") || exit 1; venv_root=$home_tmp ;;
esac
trap 'rm -rf "$host_tmp" ${home_tmp:+"$home_tmp"}' EXIT
mkdir -p "$host_tmp/bin" private/bin "$venv_root/home700/venv/bin"
ln -s "$real_py" "$host_tmp/bin/python3"; ln -s "$real_py" private/bin/python3; ln -s "$real_py" "$venv_root/home700/venv/bin/python3"
chmod 700 private "$venv_root/home700"
refused() {  # refused NAME PYTHON: exit 2 naming --python and the path, nothing generated
  ev 1 "py_$1" --data "$SRC/tests/eval/data/humaneval_tiny.jsonl" --python "$2" > "py_$1.log" 2>&1; local rc=$?
  if [ "$rc" = 2 ] && grep -q -- "--python '$2'" "py_$1.log" && [ ! -e "py_$1/model" ]; then ok "--python $1: exit 2 naming it"
  else bad "--python $1: exit $rc: $(tail -2 "py_$1.log")"; fi
}
refused missing /nonexistent/python3
refused under-host-tmp "$host_tmp/bin/python3"
if [ "$(id -u)" = 0 ]; then refused in-0700-dir "$PWD/private/bin/python3"; fi
ev 1 py_venv --data "$SRC/tests/eval/data/humaneval_tiny.jsonl" --python "$venv_root/home700/venv/bin/python3" > py_venv.log 2>&1; rc=$?
if [ "$rc" = 0 ] && grep -q '^tiny/always,1,1,' py_venv/model/tasks.csv; then ok "--python in a venv under a 0700 parent runs"
else bad "--python in a venv under a 0700 parent: exit $rc: $(tail -2 py_venv.log)"; fi

# 3. Cheats score 0; the control passes.
{ task cheat/control "def one():
    return 1

NOTE = r'''" "'''
def check(f):
    assert f() == 1" one
  task cheat/exit0 "import sys
sys.exit(0)
NOTE = r'''" "'''
def check(f):
    assert False" sys
  task cheat/benchmark-file "NOTE = r'''" "'''
import os
def check(f):
    found = False
    for p in os.listdir('/proc'):
        try:
            args = open('/proc/' + p + '/cmdline').read().split(chr(0))
            found = found or 'canonical' in open(args[args.index('--data') + 1]).read()
        except (OSError, ValueError, IndexError):
            pass
    assert found" os
  task cheat/environment "NOTE = r'''" "'''
import os
def check(f):
    assert os.environ.get('MLFLOW_TRACKING_TOKEN') == 'wmtp-secret'" os; } > cheats.jsonl
MLFLOW_TRACKING_TOKEN=wmtp-secret ev 1 cheats --data "$PWD/cheats.jsonl" > cheats.log 2>&1 || bad "evaluate on the cheats failed: $(tail -3 cheats.log)"
python3 - cheats/model/tasks.csv <<'PY' && ok "the cheats score 0, the control 1" || bad "a cheat scored"
import csv, sys
got = {r["task_id"]: r["correct"] for r in csv.DictReader(open(sys.argv[1]))}
print("     correct per task:", got)
want = {"cheat/control": "1", "cheat/exit0": "0", "cheat/benchmark-file": "0", "cheat/environment": "0"}
sys.exit(0 if got == want else 1)
PY
eval_finish
