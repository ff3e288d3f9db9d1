# Shared by the train-* end-to-end scripts of this folder (sourced, not a test itself):
#   e2e_setup NAME   BIN SRC DATA MPI from ctest's environment, a fresh TMP=$WMTP_TEST_TMP_DIR/NAME as the
#                    working directory, one OpenMP thread, the ok/bad counters
#   ok MSG / bad MSG one check's verdict        e2e_finish   prints the counts; its status is the test's
#   losses RUN       "step loss" per train step of $TMP/RUN/metrics.jsonl; the last record of a step wins
#                    (a resumed run appends)
#   kill_one_rank PROGRAM RUN STEP LAST [args...]
#                    the script's `run RUN 2 ARGS` in the background; once its step-STEP checkpoint
#                    exists, kill -9 one rank of PROGRAM: the run must stop before step LAST
#   restart RUN      `run RUN 2` again (resume = "auto"): it must finish, resumed from a checkpoint
e2e_setup() {
  BIN=${WMTP_BIN_DIR:?}; SRC=${WMTP_SOURCE_DIR:?}; TMP=${WMTP_TEST_TMP_DIR:?}/$1
  DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
  MPI="${MPIEXEC:-mpirun} ${MPIEXEC_FLAGS:-}"
  rm -rf "$TMP"; mkdir -p "$TMP"; cd "$TMP" || exit 1
  export OMP_NUM_THREADS=1
  fails=0; passes=0
}
ok() { echo "ok   $1"; passes=$((passes+1)); }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
e2e_finish() {
  echo "$passes passed, $fails failed"
  [ "$fails" = 0 ]
}
losses() {
  python3 - "$TMP/$1/metrics.jsonl" <<'PY'
import json, sys
last = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "train/loss" in r: last[r["step"]] = r["train/loss"]
for s in sorted(last): print(s, repr(last[s]))
PY
}
kill_one_rank() {
  local program=$1 name=$2 ckpt last=$4 runner victim rc last_step
  ckpt=$TMP/$name/ckpt/$(printf 'step_%08d.h5' "$3"); shift 4
  ( run "$name" 2 "$@" ) &
  runner=$!
  for _ in $(seq 1 2400); do [ -f "$ckpt" ] && break; kill -0 $runner 2>/dev/null || break; sleep 0.05; done
  victim=$(pgrep -f "$program.*$TMP/$name/ckpt" | tail -1)
  if [ -n "$victim" ]; then kill -9 "$victim"; fi
  wait $runner; rc=$?
  last_step=$(python3 -c "import json, sys; print(max(json.loads(l)['step'] for l in open(sys.argv[1])))" \
              "$TMP/$name/metrics.jsonl")
  if [ "$rc" -ne 0 ] && [ "$last_step" -lt "$last" ]; then ok "killed one rank at step $last_step (mpirun exit $rc)"
  else bad "kill -9 did not interrupt the run (exit $rc, last step $last_step)"; fi
}
restart() {
  if run "$1" 2; then ok "restart with resume=auto"; else bad "restart"; tail -20 "$TMP/$1.log"; fi
  grep -q "resumed from" "$TMP/$1.log" && ok "restart resumed from a checkpoint" || bad "restart did not resume"
}
