#!/bin/bash
# A full disk never hangs or crashes a job. Checkpoints go to a 2 MB tmpfs until one does not fit;
# at 1 and 2 ranks the writer must then end within seconds (no deadlock between a rank stuck in a
# collective write and one that threw), with exit 1 (runtime), one error message (printed once, by
# rank 0), no crash in MPI_Finalize, no .tmp left behind, and `latest` naming the last complete
# checkpoint, which still loads with its values. Both with the space reservation (fallocate: the
# failure is found before any collective write) and without it (WMTP_NO_FALLOCATE=1, as on file
# systems without fallocate: a collective H5Dwrite fails on some ranks and the ranks must agree).
# Needs `mount -t tmpfs` (root): fails, never skips, when that is impossible.
# Usage: test_disk_full.sh <ckpt_helper binary>
set -u
prog=$1
base=$WMTP_TEST_TMP_DIR/ckpt_disk_full
read -r -a flags <<< "${MPIEXEC_FLAGS:-}"
mnt=$base/mnt
cleanup() { umount "$mnt" 2> /dev/null; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; ls -la "$mnt/run" 2> /dev/null; exit 1; }

umount "$mnt" 2> /dev/null
rm -rf "$base"; mkdir -p "$mnt"
for mode in reserve no-fallocate; do
for np in 1 2; do
  cleanup
  mount -t tmpfs -o size=2m tmpfs "$mnt" || fail "cannot mount a 2 MB tmpfs on $mnt (this test needs root)"
  log=$base/write_${mode}_np$np.log
  start=$(date +%s)
  nofalloc=0; [ $mode = no-fallocate ] && nofalloc=1
  # 600 KB per checkpoint: three fit, the fourth does not. `timeout` turns a hang into exit 124.
  WMTP_NO_FALLOCATE=$nofalloc timeout -k 5 120 "$MPIEXEC" "${flags[@]}" -x WMTP_NO_FALLOCATE -np $np "$prog" write "$mnt/run" 600 > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  echo "--- $mode, np $np: exit $rc after ${secs} s"; cat "$log"
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "$mode, np $np: the writer hung on a full disk"
  [ $rc -eq 1 ] || fail "$mode, np $np: exit $rc, expected 1 (a runtime error, agreed by every rank)"
  n_err=$(grep -c "error:" "$log")
  [ "$n_err" -eq 1 ] || fail "$mode, np $np: $n_err error messages, expected exactly one"
  grep -q "No space left on device\|not enough for" "$log" || fail "$mode, np $np: the message does not say the disk is full"
  committed=$(grep -c "^committed" "$log")
  [ "$committed" -ge 1 ] || fail "$mode, np $np: not even one checkpoint fitted (make them smaller)"
  ls "$mnt"/run/*.tmp > /dev/null 2>&1 && fail "$mode, np $np: a .tmp file was left behind: $(ls "$mnt"/run)"
  latest=$(cat "$mnt/run/latest")
  [ "$latest" = "$(printf 'step_%08d.h5' "$committed")" ] || fail "$mode, np $np: latest is '$latest' after $committed commits"
  out=$("$MPIEXEC" "${flags[@]}" -np $np "$prog" check "$mnt/run" 2>&1) || fail "$mode, np $np: check: $out"
  echo "$out" | grep -q "ok step $committed " || fail "$mode, np $np: check did not load step $committed: $out"
done
done
echo PASS
