#!/usr/bin/env bash
# preprocess-metadata end to end under mpirun: -np 1/2/3 write identical datasets; every kind of bad
# input exits 2 naming file:line and the cause (found on any rank), and leaves no output behind;
# --skip-bad-lines, --max-length drop/truncate, --no-eos and several inputs are counted exactly.
# Env (from wmtp_script_test): WMTP_BIN_DIR WMTP_SOURCE_DIR WMTP_TEST_TMP_DIR MPIEXEC MPIEXEC_FLAGS,
# plus WMTP_TINY_TOKENIZER (tests/data/CMakeLists.txt).
set -uo pipefail
prog="$WMTP_BIN_DIR/preprocess-metadata"
model="$WMTP_TINY_TOKENIZER"
corpus="$WMTP_SOURCE_DIR/data/tiny"
tmp="$WMTP_TEST_TMP_DIR/data_preprocess_cli"
rm -rf "$tmp" && mkdir -p "$tmp"
read -r -a mpi_flags <<<"${MPIEXEC_FLAGS:-}"
run() { local np="$1"; shift; "$MPIEXEC" "${mpi_flags[@]}" -np "$np" "$prog" "$@"; }
source "$WMTP_SOURCE_DIR/tests/support/checks.sh"
attr() { h5dump -a "$2" "$1" 2>/dev/null | sed -n 's/^ *(0): \(.*\)$/\1/p'; }
values() { h5dump -d "$2" -y -w0 "$1" 2>/dev/null | sed -n '/DATA {/,/}/p' | sed '1d;$d' | tr -d ' ' | tr ',' '\n'; }

# 1. The same dataset whatever the number of ranks.
checks_group "1. The same dataset whatever the number of ranks"
for np in 1 2 3; do
  run "$np" --input "$corpus/train.jsonl" --tokenizer "$model" --output "$tmp/np$np.h5" >"$tmp/np$np.log" 2>&1 \
    || bad "np $np exited $? ($(tail -3 "$tmp/np$np.log"))"
done
for np in 2 3; do
  h5diff "$tmp/np1.h5" "$tmp/np$np.h5" >/dev/null || bad "-np $np output differs from -np 1"
done
[ "$(attr "$tmp/np1.h5" /stats/n_samples)" = "$(wc -l <"$corpus/train.jsonl")" ] || bad "n_samples != lines"
grep -q "samples/s" "$tmp/np2.log" || bad "no summary printed"
grep -q "possible pairs" "$tmp/np2.log" || bad "statistics not printed"
ls "$tmp"/*.tmp >/dev/null 2>&1 && bad "a .tmp file was left behind"

# 2. Help.
checks_group "2. Help"
run 1 --help >"$tmp/help.txt" 2>&1 || bad "--help exited $?"
for w in --input --tokenizer --output --max-length --on-overlength --no-eos --skip-bad-lines Example; do
  grep -q -- "$w" "$tmp/help.txt" || bad "--help lacks $w"
done

# 3. Bad input: exit 2, file:line and the cause, nothing written, no MPI_Abort. One file holds one
#    line of each kind (about half of them in rank 1's part with -np 2); all are named and counted.
checks_group "3. Bad input"
good="$tmp/good.jsonl"
head -n 6 "$corpus/train.jsonl" >"$good"
expect_bad() {  # expect_bad NAME NP EXPECTED_TEXT [args...]   (input: $tmp/NAME.jsonl unless args say)
  local name="$1" np="$2" want="$3"; shift 3
  echo OLD >"$tmp/$name.h5"
  run "$np" --input "$tmp/$name.jsonl" --output "$tmp/$name.h5" "$@" >"$tmp/$name.log" 2>&1
  local rc=$?
  [ "$rc" = 2 ] || bad "$name: exit $rc, expected 2 ($(tail -2 "$tmp/$name.log"))"
  grep -qF -- "$want" "$tmp/$name.log" || bad "$name: message lacks '$want': $(grep error "$tmp/$name.log")"
  [ "$(cat "$tmp/$name.h5")" = OLD ] || bad "$name: the existing output was touched"
  [ -e "$tmp/$name.h5.tmp" ] && bad "$name: $name.h5.tmp left behind"
  grep -q "MPI_ABORT" "$tmp/$name.log" && bad "$name: aborted instead of an agreed exit"
  return 0
}
g() { sed -n "${1}p" "$good"; }
{
  g 1; g 2
  echo '{"instruction": "x", "output": "y", '                                                     # 3
  g 3
  echo '{"instruction": "x", "task_id": "p_correct_0", "is_correct": true}'                       # 5
  echo '{"instruction": "x", "output": "y", "task_id": "p_correct_0", "is_correct": "true"}'      # 6
  echo '{"instruction": "x", "output": "y", "task_id": "p_correct_0", "is_correct": true, "metadata": {"difficulty": "hard"}}'
  g 4
  printf '{"instruction": "caf\xe9", "output": "y", "task_id": "p_correct_0", "is_correct": true}\n'  # 9
  echo ''                                                                                         # 10
  g 5; g 6
} >"$tmp/bad.jsonl"
expect_bad bad 2 "bad.jsonl:3: malformed JSON" --tokenizer "$model" --report-bad-lines 10
for want in "bad.jsonl:5: missing field 'output'" "bad.jsonl:6: field 'is_correct' must be a boolean, got string" \
    "bad.jsonl:7: field 'metadata.difficulty' must be an integer" "bad.jsonl:9: invalid UTF-8 at byte 21" \
    "bad.jsonl:10: empty line" "6 bad lines in all"; do
  grep -qF -- "$want" "$tmp/bad.log" || bad "bad: message lacks '$want'"
done
# A single bad line found by rank 1 only.
{ head -n 5 "$good"; echo '[1, 2]'; } >"$tmp/late.jsonl"
expect_bad late 2 "late.jsonl:6: a line must be a JSON object" --tokenizer "$model"
: >"$tmp/empty.jsonl"
expect_bad empty 2 "empty.jsonl: empty input" --tokenizer "$model"
expect_bad nofile 1 "nofile.jsonl: cannot open input" --tokenizer "$model"
cp "$good" "$tmp/badmodel.jsonl"
echo "junk" >"$tmp/junk.model"
expect_bad badmodel 2 "not a SentencePiece model" --tokenizer "$tmp/junk.model"
cp "$good" "$tmp/usage.jsonl"
expect_bad usage 1 "--on-overlength must be 'drop' or 'truncate'" --tokenizer "$model" --on-overlength cut
printf '{"a": 1}\n[]\n' >"$tmp/allbad.jsonl"
expect_bad allbad 1 "no samples left" --tokenizer "$model" --skip-bad-lines

# 4. --skip-bad-lines: skipped and counted.
checks_group "4. --skip-bad-lines: skipped and counted"
run 2 --input "$tmp/bad.jsonl" --tokenizer "$model" --output "$tmp/skip.h5" --skip-bad-lines >"$tmp/skip.log" 2>&1 \
  || bad "--skip-bad-lines exited $?"
[ "$(attr "$tmp/skip.h5" /stats/n_bad_lines)" = 6 ] || bad "n_bad_lines != 6"
[ "$(attr "$tmp/skip.h5" /stats/n_samples)" = 6 ] || bad "n_samples != 6 after skipping"
grep -q "bad.jsonl:3" "$tmp/skip.log" || bad "skipped lines not named"

# 5. --max-length: drop and truncate counts equal the samples longer than the limit.
checks_group "5. --max-length"
limit=150
over=$(values "$tmp/np1.h5" /samples/length | awk -v m=$limit '$1 > m' | wc -l)
[ "$over" -gt 0 ] || bad "the limit $limit drops nothing: test is vacuous"
run 2 --input "$corpus/train.jsonl" --tokenizer "$model" --output "$tmp/drop.h5" --max-length $limit >/dev/null 2>&1 \
  || bad "drop run failed"
[ "$(attr "$tmp/drop.h5" /stats/n_dropped_overlength)" = "$over" ] || bad "n_dropped_overlength != $over"
[ "$(attr "$tmp/drop.h5" /stats/length_max)" -le $limit ] || bad "drop: a sample exceeds $limit"
run 2 --input "$corpus/train.jsonl" --tokenizer "$model" --output "$tmp/trunc.h5" --max-length $limit \
  --on-overlength truncate >/dev/null 2>&1 || bad "truncate run failed"
t=$(attr "$tmp/trunc.h5" /stats/n_truncated)
p=$(attr "$tmp/trunc.h5" /stats/n_dropped_prompt_too_long)
[ $((t + p)) = "$over" ] || bad "truncated $t + prompt-too-long $p != $over"
[ "$(attr "$tmp/trunc.h5" /stats/length_max)" = $limit ] || bad "truncate: longest sample is not $limit"

# 6. --no-eos: one token fewer per sample.
checks_group "6. --no-eos: one token fewer per sample"
run 1 --input "$corpus/train.jsonl" --tokenizer "$model" --output "$tmp/noeos.h5" --no-eos >/dev/null 2>&1 \
  || bad "--no-eos failed"
n=$(attr "$tmp/np1.h5" /stats/n_samples)
[ "$(attr "$tmp/noeos.h5" /n_tokens)" = $(($(attr "$tmp/np1.h5" /n_tokens) - n)) ] || bad "--no-eos token count"
[ "$(attr "$tmp/noeos.h5" /append_eos)" = 0 ] || bad "append_eos attribute"

# 7. Several inputs = their concatenation; a last line without '\n' is still a line.
checks_group "7. Several inputs = their concatenation; a last line without '\n' is still a line"
cat "$corpus/train.jsonl" "$corpus/valid.jsonl" >"$tmp/both.jsonl"
head -c -1 "$corpus/valid.jsonl" >"$tmp/valid_nonl.jsonl"
run 3 --input "$corpus/train.jsonl" --input "$tmp/valid_nonl.jsonl" --tokenizer "$model" --output "$tmp/multi.h5" \
  >/dev/null 2>&1 || bad "two inputs failed"
run 2 --input "$tmp/both.jsonl" --tokenizer "$model" --output "$tmp/cat.h5" >/dev/null 2>&1 || bad "concatenation failed"
for obj in /tokens /samples/offsets /samples/prompt_length /samples/problem /problems/id /problems/correct; do
  h5diff "$tmp/multi.h5" "$tmp/cat.h5" "$obj" "$obj" >/dev/null || bad "two inputs != concatenation at $obj"
done
[ "$(values "$tmp/multi.h5" /samples/source_file | sort -u | tr '\n' ' ')" = "0 1 " ] || bad "source_file column"
[ "$(values "$tmp/multi.h5" /samples/source_line | tail -n 1)" = "$(wc -l <"$corpus/valid.jsonl")" ] \
  || bad "last source_line is not the last line of the second file"

# 8. Output-path problems are usage errors found before any work: exit 2 naming the path, on every
#    rank count, no .tmp left behind. (Root ignores permissions: the unwritable case then runs the
#    program as nobody.)
checks_group "8. Output-path problems are usage errors found before any work"
out_bad() {  # out_bad NAME NP OUTPUT EXPECTED_TEXT [runner...]
  local name="$1" np="$2" out="$3" want="$4"; shift 4
  "$@" "$MPIEXEC" "${mpi_flags[@]}" -np "$np" "$prog" --input "$good" --tokenizer "$model" --output "$out" \
    >"$tmp/$name.log" 2>&1
  local rc=$?
  [ "$rc" = 2 ] || bad "$name: exit $rc, expected 2 ($(tail -2 "$tmp/$name.log"))"
  grep -qF -- "$want" "$tmp/$name.log" || bad "$name: message lacks '$want': $(grep error "$tmp/$name.log")"
  [ "$(grep -c 'error' "$tmp/$name.log")" = 1 ] || bad "$name: not exactly one error message"
  ls "$out".tmp "$(dirname "$out")"/*.tmp >/dev/null 2>&1 && bad "$name: a .tmp file was left behind"
  grep -q "MPI_ABORT" "$tmp/$name.log" && bad "$name: aborted instead of an agreed exit"
  return 0
}
mkdir -p "$tmp/outdir.h5"
out_bad outdir 2 "$tmp/outdir.h5" "--output '$tmp/outdir.h5' is a directory"
echo file >"$tmp/afile"
out_bad outparent 2 "$tmp/afile/x.h5" "'$tmp/afile' is a file, not a directory"
mkdir -p "$tmp/readonly" && chmod 555 "$tmp/readonly" && chmod 755 "$tmp"
chmod o+r "$good" "$model"
as_user=()
if [ "$(id -u)" = 0 ]; then as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups); fi
out_bad readonly 1 "$tmp/readonly/x.h5" "readonly' is not writable" "${as_user[@]}"

# 9. A huge line that cannot fit --max-length is dropped without being tokenized, and said so.
checks_group "9. A huge line that cannot fit --max-length is dropped without being tokenized, and said so"
{
  head -n 3 "$good"
  printf '{"instruction": "x", "output": "'; head -c 3000000 /dev/zero | tr '\0' 'a' | sed 's/a\{40\}/& /g'
  printf '", "task_id": "huge_correct_0", "is_correct": true}\n'
  sed -n 4,6p "$good"
} >"$tmp/huge.jsonl"
run 2 --input "$tmp/huge.jsonl" --tokenizer "$model" --output "$tmp/huge.h5" --max-length 256 >"$tmp/huge.log" 2>&1 \
  || bad "huge line: exited $?"
[ "$(attr "$tmp/huge.h5" /stats/n_dropped_overlength)" = 1 ] || bad "huge line: not counted as overlength"
[ "$(attr "$tmp/huge.h5" /stats/n_samples)" = 6 ] || bad "huge line: the other samples were not kept"
grep -q "1 sample(s) dropped without tokenizing" "$tmp/huge.log" || bad "huge line: no message ($(tail -3 "$tmp/huge.log"))"

checks_finish
echo "all preprocess-metadata CLI checks passed"
