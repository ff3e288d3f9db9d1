# Shared by the Slurm tests (sourced). The first thing a test does is `slurm_test_begin NAME`:
# outside a cluster it re-runs the test script inside a fresh one (scripts/slurm/cluster.sh run,
# which stops every daemon when the script ends, pass or fail); a cluster that cannot start makes
# the test fail with cluster.sh's reason, never skip.
BIN=${WMTP_BIN_DIR:?set by ctest}; SRC=${WMTP_SOURCE_DIR:?set by ctest}
source "$SRC/tests/support/checks.sh"

# SLURM_TEST_CLUSTER: the cluster's shape, "--nodes 2" (two slurmd on this host) unless the test
# sets it, e.g. "--hosts 3": three test hosts in namespaces (scripts/slurm/test_hosts.sh).
slurm_test_begin() {  # slurm_test_begin NAME SCRIPT [ARGS...]
  local name=$1 script=$2; shift 2
  if [ -z "${WMTP_SLURM_CLUSTER_DIR:-}" ]; then
    local start rc=0
    start=$(date +%s)
    # shellcheck disable=SC2086
    bash "$SRC/scripts/slurm/cluster.sh" run ${SLURM_TEST_CLUSTER:---nodes 2} -- bash "$script" "$@" || rc=$?
    echo "$name: $(( $(date +%s) - start )) s wall, cluster start and stop included"
    [ "$rc" = 0 ] || echo "$name: FAILED (exit $rc): see the FAIL lines above, or why the cluster did not start"
    exit "$rc"
  fi
  TMP=${WMTP_TEST_TMP_DIR:?set by ctest}/$name
  rm -rf "$TMP"; mkdir -p "$TMP/logs"; cd "$TMP"
}

slurm_test_end() {
  if [ "$fails" != 0 ]; then
    echo "--- slurmctld log (tail)"; tail -20 "$WMTP_SLURM_CLUSTER_DIR/log/slurmctld.log"
    for f in "$WMTP_SLURM_CLUSTER_DIR"/log/slurmd-*.log; do echo "--- $f (tail)"; tail -8 "$f"; done
  fi
  checks_finish
}

# job_field ID FIELD: one field of `scontrol show job` (JobState, ExitCode, Restarts, Reason, ...).
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

# wait_job ID SECONDS STATE...: wait until the job is in one of STATEs; 1 on timeout.
wait_job() {
  local id=$1 secs=$2 st; shift 2
  local deadline=$(( $(date +%s) + secs ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    st=$(job_field "$id" JobState)
    for want in "$@"; do [ "$st" = "$want" ] && return 0; done
    sleep 0.5
  done
  echo "job $id still ${st:-unknown} after $secs s (waited for: $*); $(scontrol show job -o "$id" 2>&1 | head -c 600)"
  return 1
}

# losses FILE: "step loss" per train step of a metrics.jsonl, the last record per step winning
# (a resumed run appends). Prints nothing for a missing or empty file.
losses() {
  python3 - "$1" <<'PY'
import json, os, sys
last = {}
if os.path.exists(sys.argv[1]):
    for line in open(sys.argv[1]):
        r = json.loads(line)
        if "train/loss" in r: last[r["step"]] = r["train/loss"]
for s in sorted(last): print(s, repr(last[s]))
PY
}
