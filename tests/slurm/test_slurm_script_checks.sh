#!/usr/bin/env bash
# The Slurm scripts' own checks, without a running cluster:
#  1. cluster.sh refuses a shape that is not a whole number in range (--hosts abc, 0, -1, 1.5, 245;
#     --nodes 0, 65), both shapes at once, and an unknown argument: exit 2 naming it, before anything
#     starts (no cluster directory made).
#  2. Test hosts (test_hosts.sh) inside a network + mount namespace of this test's own (so nothing of
#     another cluster on this machine is in reach): two clusters whose directories have the same
#     basename come up side by side with different ids; taking one down leaves the other whole; a
#     basename without letters or digits gets an id too; a start that fails half way removes what it
#     made and nothing else; at the end nothing is left.
#  3. sbatch/train.sbatch with MAX_RESTARTS that is not a number: exit 2 naming it, the program never
#     started; with a number, a program that exits 75 is requeued (stand-ins for srun and scontrol).
#  4. A scancel signals the script and the launcher at the same moment (SIGTERM to every process of
#     the job): the script reports the launcher's own status (75) and, Slurm ending the job, does not
#     requeue it. Bash can lose a child's status when a trap interrupts `wait` just as the child exits
#     (it returns -1: 4 jobs in 10 here, 16 at a time, with a script that blocks in `wait`), so
#     $TRIALS jobs are signalled, each at a random moment.
set -u
SRC=${WMTP_SOURCE_DIR:?set by ctest}; TMP=${WMTP_TEST_TMP_DIR:?set by ctest}/slurm_script_checks
rm -rf "$TMP"; mkdir -p "$TMP"
source "$SRC/tests/support/checks.sh"
CLUSTER=$SRC/scripts/slurm/cluster.sh

# 1. cluster.sh's arguments. A bound on the wait: a script that loops instead of refusing fails here.
refused() {  # refused NAME NEEDLE ARGS...: exit 2 and a message holding NEEDLE, no directory made
  local name=$1 needle=$2 out rc; shift 2
  out=$(timeout 60 bash "$CLUSTER" "$@" 2>&1); rc=$?
  if [ "$rc" = 2 ] && grep -qF -- "$needle" <<< "$out" && [ ! -e "$TMP/c1" ]; then ok "$name: exit 2 ($out)"
  else
    bad "$name: exit $rc: $(tail -3 <<< "$out")"
    [ -e "$TMP/c1" ] && { bash "$CLUSTER" stop "$TMP/c1" > /dev/null 2>&1; rm -rf "$TMP/c1"; }
  fi
}
for n in abc 0 -1 1.5 245 ''; do refused "start --hosts '$n'" "--hosts '$n'" start "$TMP/c1" --hosts "$n"; done
for n in 0 65 x; do refused "start --nodes '$n'" "--nodes '$n'" start "$TMP/c1" --nodes "$n"; done
refused "start with both shapes" "already --nodes 2" start "$TMP/c1" --nodes 2 --hosts 2
refused "start with an unknown argument" "unknown argument '--host'" start "$TMP/c1" --host 2
refused "run --hosts abc" "--hosts 'abc'" run --hosts abc -- true
refused "run with an unknown option" "unknown option '--hots'" run --hots 2 -- true

# 2. Test hosts, in namespaces of this test's own: /run/netns a fresh tmpfs, links only ours.
cat > "$TMP/hosts.sh" <<'SH'
set -u
SRC=$1 T=$2
mount -t tmpfs none /run/netns 2> /dev/null || { mkdir -p /run/netns && mount -t tmpfs none /run/netns; } || exit 3
die() { echo "die: $*" >&2; exit 1; }
source "$SRC/scripts/slurm/test_hosts.sh"
says() { echo "$1 $2"; }
names() { ip netns list | awk '{print $1}' | sort | tr '\n' ' '; ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -v '^lo$' | sort | tr '\n' ' '; }
for d in a/c b/c ---; do mkdir -p "$T/$d/log"; done
( hosts_up "$T/a/c" 2 ) > /dev/null 2>&1 && says ok "a/c up" || says bad "a/c did not come up"
before=$(names)
( hosts_up "$T/b/c" 2 ) > "$T/b.log" 2>&1 && says ok "b/c up beside a/c" || says bad "b/c (same basename) did not come up: $(tail -1 "$T/b.log")"
ida=$(cat "$T/a/c/hosts-id" 2> /dev/null); idb=$(cat "$T/b/c/hosts-id" 2> /dev/null)
[ -n "$ida" ] && [ -n "$idb" ] && [ "$ida" != "$idb" ] && says ok "ids differ ($ida, $idb)" || says bad "ids '$ida' and '$idb'"
hosts_down "$T/b/c"
[ "$(names)" = "$before" ] && says ok "b/c down: a/c's namespaces and links all there" || says bad "b/c down changed a/c's: [$before] -> [$(names)]"
( hosts_up "$T/---" 1 ) > "$T/dash.log" 2>&1 && says ok "basename '---' up" || says bad "basename '---': $(tail -1 "$T/dash.log")"
idd=$(cat "$T/---/hosts-id" 2> /dev/null)
[[ "$idd" =~ ^[0-9a-f]{6}$ ]] && says ok "basename '---' has id $idd" || says bad "basename '---' has id '$idd'"
hosts_down "$T/---"
[ "$(names)" = "$before" ] && says ok "'---' down: a/c's all there" || says bad "'---' down changed a/c's: [$before] -> [$(names)]"
# A start that fails at host 2: what it made goes, a/c stays.
mkdir -p "$T/f/log"
( ip() { [[ "$*" == "netns add wmtp-"*"-host2" ]] && { echo "stand-in failure" >&2; return 1; }; command ip "$@"; }
  hosts_up "$T/f" 3 ) > /dev/null 2>&1 && says bad "the failing start succeeded"
hosts_down "$T/f"
[ "$(names)" = "$before" ] && says ok "a failed start removed its own, a/c's all there" || says bad "after a failed start: [$before] -> [$(names)]"
hosts_down "$T/a/c"
[ -z "$(ip netns list)" ] && [ -z "$(ip -o link show | grep -v ': lo:')" ] && says ok "all down: nothing left" || says bad "left: $(names)"
SH
seen=0
while read -r verdict msg; do
  seen=$((seen + 1))
  case "$verdict" in ok) ok "hosts: $msg" ;; bad) bad "hosts: $msg" ;; *) seen=$((seen - 1)); [ "$msg" = 0 ] || bad "hosts: exit $msg" ;; esac
done < <(unshare --net --mount --propagation private bash "$TMP/hosts.sh" "$SRC" "$TMP/hosts" 2> "$TMP/hosts.err"; echo "rc $?")
[ "$seen" -ge 9 ] || bad "hosts: $seen of 9 checks ran"
grep -q . "$TMP/hosts.err" && { echo "--- stderr of the hosts checks"; tail -5 "$TMP/hosts.err"; }

# 3. train.sbatch's MAX_RESTARTS: stand-in srun (runs the program), scontrol (RUNNING; records requeues).
mkdir -p "$TMP/bin" "$TMP/wbin"
printf '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n' > "$TMP/bin/srun"
printf '#!/bin/sh\ncase "$*" in requeue*) echo "$*" >> "%s/requeued";; *) echo "JobId=1 JobState=RUNNING";; esac\n' \
  "$TMP" > "$TMP/bin/scontrol"
printf '#!/bin/sh\necho ran >> "%s/ran"\nexit 75\n' "$TMP" > "$TMP/wbin/train-baseline"
chmod +x "$TMP/bin/srun" "$TMP/bin/scontrol" "$TMP/wbin/train-baseline"
job() {  # job MAX_RESTARTS: train.sbatch as Slurm would start it, its output in $out, exit in $rc
  rm -f "$TMP/ran" "$TMP/requeued"
  out=$(cd "$TMP" && env PATH="$TMP/bin:$PATH" SLURM_JOB_ID=1 SLURM_JOB_NODELIST=n1 WMTP_BIN="$TMP/wbin" \
        MAX_RESTARTS="$1" bash "$SRC/sbatch/train.sbatch" 2>&1); rc=$?
}
for m in abc -1 1.5; do
  job "$m"
  if [ "$rc" = 2 ] && grep -qF "MAX_RESTARTS='$m'" <<< "$out" && [ ! -e "$TMP/ran" ]; then ok "MAX_RESTARTS=$m: exit 2, nothing run"
  else bad "MAX_RESTARTS=$m: exit $rc, program run: $([ -e "$TMP/ran" ] && echo yes || echo no): $(tail -2 <<< "$out")"; fi
done
job 3
[ -e "$TMP/ran" ] && grep -q "^requeue 1" "$TMP/requeued" 2> /dev/null && ok "MAX_RESTARTS=3: exit 75 requeued" \
  || bad "MAX_RESTARTS=3: not requeued (exit $rc): $(tail -2 <<< "$out")"

# 4. SIGTERM to the whole job at once: stand-in srun exits 75 on it, scontrol says CANCELLED.
TRIALS=${TRIALS:-128}
mkdir -p "$TMP/bin-term" "$TMP/term"
cat > "$TMP/bin-term/srun" <<'SH'
#!/bin/bash
trap 'exit 75' TERM
ps -o pgid= $$ | tr -d ' ' > "$WMTP_MARK.tmp" && mv "$WMTP_MARK.tmp" "$WMTP_MARK"
for _ in $(seq 1 600); do sleep 0.05; done
exit 1
SH
printf '#!/bin/sh\ncase "$*" in requeue*) echo "$*" >> "%s/term/requeued";; *) echo "JobId=1 JobState=CANCELLED";; esac\n' \
  "$TMP" > "$TMP/bin-term/scontrol"
chmod +x "$TMP/bin-term/srun" "$TMP/bin-term/scontrol"
term_job() {  # term_job N: train.sbatch in a session of its own, SIGTERM to that session once srun runs
  local d=$TMP/term/$1 pg=""
  mkdir -p "$d"
  ( cd "$d" && setsid env PATH="$TMP/bin-term:$PATH" SLURM_JOB_ID=1 SLURM_JOB_NODELIST=n1 WMTP_BIN="$TMP/wbin" \
      WMTP_MARK="$d/pgid" bash "$SRC/sbatch/train.sbatch" > "$d/out" 2>&1; echo $? > "$d/rc" ) &
  for _ in $(seq 1 500); do pg=$(cat "$d/pgid" 2> /dev/null) && [ -n "$pg" ] && break; sleep 0.02; done
  sleep "0.0$((RANDOM % 10))"
  [ -n "$pg" ] && kill -TERM -- "-$pg"
  wait
}
for ((b = 0; b < TRIALS / 16; b++)); do
  for i in $(seq 1 16); do term_job "$((b * 16 + i))" & done
  wait
done
lost=0; first=""
for d in "$TMP"/term/*/; do
  [ "$(cat "$d/rc" 2> /dev/null)" = 75 ] && grep -q "exited 75 " "$d/out" && grep -q "not requeueing" "$d/out" && continue
  lost=$((lost + 1))
  [ -n "$first" ] || first="exit $(cat "$d/rc" 2> /dev/null): $(grep "exited\|requeu" "$d/out" | tr '\n' ' ')"
done
n=$(find "$TMP/term" -mindepth 1 -maxdepth 1 -type d | wc -l)
[ "$n" -ge "$TRIALS" ] && [ "$lost" = 0 ] && [ ! -e "$TMP/term/requeued" ] \
  && ok "scancel x $n: the launcher's 75 reported every time, never requeued" \
  || bad "scancel: $lost of $n jobs misreported ($first)$([ -e "$TMP/term/requeued" ] && echo "; requeued")"

checks_finish
