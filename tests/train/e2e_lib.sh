# Shared by the train-* end-to-end scripts of this folder (sourced, not a test itself):
#   e2e_setup NAME   BIN SRC DATA MPI from ctest's environment, a fresh TMP=$WMTP_TEST_TMP_DIR/NAME as the
#                    working directory, one OpenMP thread, the ok/bad counters
#   ok MSG / bad MSG one check's verdict        e2e_finish   prints the counts; its status is the test's
#   losses RUN       "step loss" per train step of $TMP/RUN/metrics.jsonl; the last record of a step wins
#                    (a resumed run appends)
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
