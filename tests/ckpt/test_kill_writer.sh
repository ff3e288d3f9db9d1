#!/bin/bash
# kill -9 one rank of a 2-rank checkpoint writer while it writes; then the previous checkpoint and
# `latest` must be intact and loadable at 1 and 2 ranks, and the half-written .tmp must be ignored.
# Usage: test_kill_writer.sh <ckpt_kill_writer binary>
set -u
prog=$1
dir=$WMTP_TEST_TMP_DIR/ckpt_kill_writer
rm -rf "$dir"; mkdir -p "$dir"
read -r -a flags <<< "${MPIEXEC_FLAGS:-}"
fail() { echo "FAIL: $*"; ls -la "$dir"; exit 1; }

$MPIEXEC "${flags[@]}" -np 2 "$prog" write "$dir/run" 24 > "$dir/writer.log" 2>&1 &
mpirun_pid=$!

# Wait until two checkpoints are committed and the third is being written.
for _ in $(seq 1 600); do
  committed=$(grep -c committed "$dir/writer.log" 2>/dev/null || true)
  if [ "${committed:-0}" -ge 2 ] && ls "$dir"/run/*.h5.tmp > /dev/null 2>&1 && [ -f "$dir/run/pid.1" ]; then break; fi
  kill -0 $mpirun_pid 2>/dev/null || fail "writer exited early: $(cat "$dir/writer.log")"
  sleep 0.1
done
tmp_before=$(ls "$dir"/run/*.h5.tmp 2>/dev/null | head -1)
[ -n "$tmp_before" ] || fail "no checkpoint was being written"
victim=$(cat "$dir/run/pid.1")
kill -9 "$victim"
echo "killed rank 1 (pid $victim) while writing $(basename "$tmp_before")"
wait $mpirun_pid 2>/dev/null
echo "writer log:"; cat "$dir/writer.log" | head -5

latest=$(cat "$dir/run/latest")
echo "latest -> $latest"
[ -f "$dir/run/$latest" ] || fail "latest names a missing file"
ls "$dir"/run/*.h5.tmp > /dev/null 2>&1 || fail "expected the killed writer's .tmp to remain"
latest_step=$((10#$(echo "$latest" | sed 's/step_\([0-9]*\)\.h5/\1/')))
[ "$latest_step" -ge 2 ] || fail "latest step $latest_step < 2"

for np in 1 2; do
  out=$($MPIEXEC "${flags[@]}" -np $np "$prog" check "$dir/run" 2>&1) || fail "check at $np ranks: $out"
  echo "check at $np ranks: $out"
  echo "$out" | grep -q "ok step $latest_step " || fail "resume did not pick $latest: $out"
done
echo PASS
