#!/usr/bin/env bash
# --dry-run against measured peaks (tests/plan/dry_run_measured.txt): each row's planned "total" —
# peak RSS on the CPU, the caching allocator's reserved peak for a CUDA plan (planned here, without a
# GPU) — within 10 % of the figure measured for the same run. A row that cannot be planned fails.
set -uo pipefail
BIN="${WMTP_BIN_DIR:?}"; SRC="${WMTP_SOURCE_DIR:?}"
BENCH_SMALL="--set model.dim=512 --set model.n_layers=8 --set model.n_heads=8 --set model.n_kv_heads=8 \
--set model.n_future_tokens=4 --set model.vocab_size=32000 --set model.max_seq_len=512 --set model.multiple_of=256 \
--set lora.enabled=false --set data.train= --set data.valid= --set data.max_length=512 --set data.pad_to=max_length \
--set training.micro_batch_size=4 --set sharding.param_dtype=fp32 --set model.activation_checkpointing=false"
MODEL_1B="--set model.dim=2048 --set model.n_layers=16 --set model.n_heads=16 --set model.n_kv_heads=16 \
--set model.n_future_tokens=4 --set model.vocab_size=32000 --set model.max_seq_len=2048 --set model.multiple_of=256 \
--set lora.enabled=false --set data.train= --set data.valid= --set data.max_length=2048 --set data.pad_to=max_length \
--set sharding.param_dtype=bf16"
source "$SRC/tests/support/checks.sh"
rows=0
while IFS='|' read -r name np measured args; do
  name=$(echo $name); np=$(echo $np); measured=$(echo $measured)
  [ -z "$name" ] || [ "${name:0:1}" = "#" ] && continue
  args=${args//BENCH_SMALL/$BENCH_SMALL}; args=${args//MODEL_1B/$MODEL_1B}
  rows=$((rows + 1))
  # shellcheck disable=SC2086
  out=$("$BIN/train-baseline" -c "$SRC/configs/tiny.toml" $args --dry-run --world-size "$np" 2>&1)
  total=$(echo "$out" | awk '/^  total /{v=$2; u=$3; if (u=="MiB") v/=1024; if (u=="KiB") v/=1048576; print v; exit}')
  if [ -z "$total" ]; then bad "$name np $np: no total in the dry run"; echo "$out" | tail -5; continue; fi
  if diff=$(rel_diff "$total" "$measured" 0.1); then ok "$name np $np: planned $total GiB, measured $measured GiB (rel diff $diff)"
  else bad "$name np $np: planned $total GiB, measured $measured GiB (rel diff $diff, more than 0.1)"; fi
done < "$SRC/tests/plan/dry_run_measured.txt"
[ "$rows" -ge 5 ] || bad "only $rows rows read"
checks_finish
