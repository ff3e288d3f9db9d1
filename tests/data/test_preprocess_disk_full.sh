#!/bin/bash
# preprocess-metadata on a full disk never hangs: the output goes to a small tmpfs that runs out
# early (the token column), later (another column) or at the very end, at 1 and 2 ranks. Each run
# must end within seconds (`timeout`: a rank left in a collective write while another threw is exit
# 124) with exit 1, one error message naming the output and "no space", no MPI_Abort, and nothing
# left in the output directory (no .tmp). Both with the space reservation (fallocate: the failure is
# found before any collective write) and without it (WMTP_NO_FALLOCATE=1, as on file systems without
# fallocate: a collective H5Dwrite fails on some ranks and the ranks must agree). Then the same
# input on a tmpfs big enough: written, and equal to the file written on the ordinary disk.
# Needs `mount -t tmpfs` (root): fails, never skips, when that is impossible.
# Env (from wmtp_script_test) plus WMTP_TINY_TOKENIZER (tests/data/CMakeLists.txt).
set -u
prog="$WMTP_BIN_DIR/preprocess-metadata"
input="$WMTP_SOURCE_DIR/data/tiny/train.jsonl"
base=$WMTP_TEST_TMP_DIR/data_preprocess_disk_full
read -r -a flags <<< "${MPIEXEC_FLAGS:-}"
mnt=$base/mnt
cleanup() { umount "$mnt" 2> /dev/null; }
trap cleanup EXIT
source "$WMTP_SOURCE_DIR/tests/support/checks.sh"
mount_tmpfs() {  # mount_tmpfs SIZE
  cleanup
  mount -t tmpfs -o "size=$1" tmpfs "$mnt" || { bad "cannot mount a tmpfs on $mnt (this test needs root)"; exit 1; }
}
# preprocess NP OUT LOG: under timeout, WMTP_NO_FALLOCATE=$nofalloc passed to every rank
preprocess() {
  WMTP_NO_FALLOCATE=$nofalloc timeout -k 5 60 "$MPIEXEC" "${flags[@]}" -x WMTP_NO_FALLOCATE -np "$1" "$prog" \
    --input "$input" --tokenizer "$WMTP_TINY_TOKENIZER" --output "$2" > "$3" 2>&1
}

umount "$mnt" 2> /dev/null
rm -rf "$base"; mkdir -p "$mnt"
nofalloc=0
preprocess 2 "$base/full.h5" "$base/full.log" || { bad "preprocess on the ordinary disk: $(tail -3 "$base/full.log")"; exit 1; }
full=$(stat -c %s "$base/full.h5")
echo "the dataset takes $full bytes"

# Sizes: a quarter (the tokens do not fit), 90 % (a later column does not), the size less 4 KB (only
# the metadata the close flushes does not). Without fallocate the last one is left out: the flush is
# one HDF5 call whose own collectives diverge when its write fails on some ranks (seen hanging at
# np 2), which no agreement around it can repair (docs/data.md).
sizes="$((full / 4 / 4096 * 4096)) $((full * 9 / 10 / 4096 * 4096))"
for mode in reserve no-fallocate; do
  nofalloc=0; [ $mode = no-fallocate ] && nofalloc=1
  extra=""; [ $mode = reserve ] && extra=$(((full - 4096) / 4096 * 4096))
  for size in $sizes $extra; do
    for np in 1 2; do
      what="$mode, tmpfs $size bytes, np $np"
      checks_group "$what: exit 1, one message naming the output and 'no space', nothing left"
      mount_tmpfs "$size"
      log=$base/${mode}_${size}_np$np.log
      start=$(date +%s)
      preprocess $np "$mnt/out/train.h5" "$log"
      rc=$?
      echo "--- $what: exit $rc after $(( $(date +%s) - start )) s"; grep "error:" "$log"
      if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then bad "$what: hung (killed after 60 s)"; continue; fi
      [ $rc -eq 1 ] || bad "$what: exit $rc, expected 1 (a runtime error, agreed by every rank)"
      [ "$(grep -c "error:" "$log")" -eq 1 ] || bad "$what: $(grep -c "error:" "$log") error messages, expected one"
      grep "error:" "$log" | grep -q "$mnt/out/train.h5" || bad "$what: the message does not name the output"
      grep "error:" "$log" | grep -qi "no space" || bad "$what: the message does not say 'no space'"
      grep -q "MPI_ABORT" "$log" && bad "$what: MPI_Abort"
      left=$(ls -A "$mnt/out" 2> /dev/null)
      [ -z "$left" ] || bad "$what: left behind in the output directory: $left"
    done
  done
done

# Enough room: the file is written whole, with the reservations released.
checks_group "room to spare: the file written whole, nothing beside it"
nofalloc=0
mount_tmpfs $(((full + 256 * 1024) / 4096 * 4096))
if preprocess 2 "$mnt/out/train.h5" "$base/fits.log"; then
  h5diff "$base/full.h5" "$mnt/out/train.h5" > /dev/null || bad "the file written on the tmpfs differs from the one on disk"
  [ "$(ls -A "$mnt/out")" = train.h5 ] || bad "left beside the output: $(ls -A "$mnt/out")"
else bad "preprocess with room to spare: exit $? ($(grep error: "$base/fits.log"))"; fi

checks_finish
