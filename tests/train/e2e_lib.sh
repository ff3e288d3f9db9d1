# Shared by the train-* end-to-end scripts of this folder and tests/pipelines (sourced, not a test itself):
#   e2e_setup NAME   BIN SRC DATA MPI from ctest's environment, a fresh TMP=$WMTP_TEST_TMP_DIR/NAME as the
#                    working directory, one OpenMP thread, the ok/bad counters
#   ok MSG / bad MSG one check's verdict        e2e_finish   prints the counts; its status is the test's
#                    (tests/support/checks.sh)
#   losses RUN       "step loss" per train step of $TMP/RUN/metrics.jsonl; the last record of a step wins
#                    (a resumed run appends)
#   loss_diff A B FIRST LAST [TOL]   rel_diff (tests/support/checks.sh) of run B's train/loss against
#                    run A's over steps FIRST..LAST, each of them in both runs (else status 2); printed,
#                    and with TOL the status says whether it is <= TOL
#   host_syncs RUN MAX   every record of $TMP/RUN/metrics.jsonl has 0 < perf/host_syncs_per_step <= MAX:
#                    reads of computed tensor values to the host, counted on any device
#                    (core/phase_timer.h read_to_host), so a read added per micro-batch raises it
#   $MPI -np N PROG ARGS...   mpirun through e2e_mpirun (below): where the e2e runs go on this machine
#   run NAME NP [args...]   $BIN/$PROGRAM "${common[@]}" args at NP ranks, checkpoints and metrics under
#                    $TMP/NAME, output in $TMP/NAME.log; with E2E_RUN_LIMIT set, killed after that many s
#   kill_one_rank PROGRAM RUN STEP LAST [args...]
#                    the script's `run RUN 2 ARGS` in the background; once its step-STEP checkpoint
#                    exists, kill -9 one rank of PROGRAM: the run must stop before step LAST
#   restart RUN      `run RUN 2` again (resume = "auto"): it must finish, resumed from a checkpoint
#
# Devices: the runs use the configs' [runtime] device = "auto": the CPU on a machine without a GPU
# (or a CPU build), the GPUs where there are some, so that a GPU machine runs these chains on its
# GPUs. NCCL needs a GPU per rank, so a train-* program started on more ranks than the machine has
# GPUs gets --set runtime.communicator=staged (its ranks share the GPUs through MPI); this is the one
# place that decides it. e2e_gpus: the GPUs this machine shows (WMTP_TEST_GPUS overrides the count).
E2E_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$E2E_LIB_DIR/../support/checks.sh"
e2e_gpus() {
  if [ -n "${WMTP_TEST_GPUS:-}" ]; then echo "$WMTP_TEST_GPUS"; return; fi
  local n=0
  command -v nvidia-smi >/dev/null 2>&1 && n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ "$n" -gt 0 ] && [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then  # narrowed (an empty list hides them all)
    local v; v=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c '[0-9A-Za-z]')
    [ "$v" -lt "$n" ] && n=$v
  fi
  echo "$n"
}
# e2e_mpirun [mpirun options] -np N PROG ARGS...: the launcher of ctest (MPIEXEC, MPIEXEC_FLAGS), exec'd
# (signals and $! reach mpirun itself), with the communicator choice above for train-* programs.
e2e_mpirun() {
  local opts=() np=1
  while [ $# -gt 0 ]; do
    case "$1" in
      -np|-n|--np) np=$2; opts+=("$1" "$2"); shift 2 ;;
      -*) opts+=("$1"); shift ;;
      *) break ;;
    esac
  done
  local prog=${1:?e2e_mpirun: no program}; shift
  local runtime=()
  local gpus; gpus=$(e2e_gpus)
  case "$(basename "$prog")" in
    train-*) [ "$gpus" -gt 0 ] && [ "$np" -gt "$gpus" ] && runtime=(--set runtime.communicator=staged) ;;
  esac
  # shellcheck disable=SC2086
  exec ${MPIEXEC:-mpirun} ${MPIEXEC_FLAGS:-} "${opts[@]}" "$prog" "${runtime[@]}" "$@"
}
e2e_setup() {
  BIN=${WMTP_BIN_DIR:?}; SRC=${WMTP_SOURCE_DIR:?}; TMP=${WMTP_TEST_TMP_DIR:?}/$1
  DATA=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
  MPI="$E2E_LIB_DIR/e2e_mpirun.sh"
  rm -rf "$TMP"; mkdir -p "$TMP"; cd "$TMP" || exit 1
  export OMP_NUM_THREADS=1
  fails=0; passes=0
}
e2e_finish() { checks_finish; }
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
loss_diff() {
  local a b n=$(($4 - $3 + 1))
  a=$(losses "$1" | awk -v f="$3" -v l="$4" '$1 >= f && $1 <= l {print $2}')
  b=$(losses "$2" | awk -v f="$3" -v l="$4" '$1 >= f && $1 <= l {print $2}')
  if [ "$(wc -w <<<"$a")" != "$n" ] || [ "$(wc -w <<<"$b")" != "$n" ]; then
    echo "loss_diff: steps $3-$4 are not all in $1 and $2" >&2; return 2
  fi
  rel_diff "$b" "$a" ${5:-}
}
run() {
  local name=$1 np=$2 limit=(); shift 2
  [ -n "${E2E_RUN_LIMIT:-}" ] && limit=(timeout -k 5 "$E2E_RUN_LIMIT")
  "${limit[@]}" $MPI -np "$np" "$BIN/${PROGRAM:?run: no PROGRAM}" "${common[@]}" \
    --set checkpoint.dir="$TMP/$name/ckpt" --set training.run_dir="$TMP/$name" "$@" > "$TMP/$name.log" 2>&1
}
host_syncs() {
  python3 - "$TMP/$1/metrics.jsonl" "$2" <<'PY'
import json, sys
v = [json.loads(l).get("perf/host_syncs_per_step") for l in open(sys.argv[1])]
v = sorted(set(x for x in v if x is not None))
assert v and all(0 < x <= float(sys.argv[2]) for x in v), f"perf/host_syncs_per_step {v}, expected in (0, {sys.argv[2]}]"
print(f"perf/host_syncs_per_step {v}")
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
