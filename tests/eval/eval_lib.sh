# Shared by the generate/evaluate script tests (sourced, not a test itself):
#   eval_setup NAME SEED   BIN SRC TOK MPI from ctest's environment, a fresh $WMTP_TEST_TMP_DIR/NAME as
#                          the working directory, and model.h5: a random tiny MTP model (make_tiny_model.py,
#                          vocab 512 = the tiny tokenizer) imported by convert-checkpoint
#   ok MSG / bad MSG       one check's verdict      eval_finish   prints the counts; its status is the test's
#                          (tests/support/checks.sh)
source "$(dirname "${BASH_SOURCE[0]}")/../support/checks.sh"
eval_setup() {
  BIN=${WMTP_BIN_DIR:?}; SRC=${WMTP_SOURCE_DIR:?}; TMP=${WMTP_TEST_TMP_DIR:?}/$1
  TOK=${WMTP_TINY_TOKENIZER:?}
  MPI="${MPIEXEC:-mpirun} ${MPIEXEC_FLAGS:-}"
  rm -rf "$TMP"; mkdir -p "$TMP"; cd "$TMP" || exit 1
  fails=0; passes=0
  "${WMTP_PYTHON:?}" "$SRC/tests/eval/make_tiny_model.py" meta 512 "$2" || { echo "FAIL cannot make the tiny model"; exit 1; }
  "$BIN/convert-checkpoint" import --from meta --input meta/model.safetensors --output model.h5 >/dev/null ||
    { echo "FAIL convert-checkpoint import"; exit 1; }
}
eval_finish() { checks_finish; }
