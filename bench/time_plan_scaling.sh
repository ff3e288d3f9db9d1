#!/usr/bin/env bash
# The 7B config on paper, from 8 to 1024 GPUs: --dry-run's time plan with the published H100 profile
# (configs/machines/h100-8gpu-ib400.toml: 8 GPUs per node on NVLink, one 400 Gb/s NDR NIC per GPU)
# for full_shard and hybrid_shard (groups of one node's 8 GPUs), printing tokens/s per GPU, the
# exposed communication and which strategy wins at each size. configs/7b-1gpu.toml's model and batch
# shape (dim 4096, 32 layers, n_future 4, vocab 32000, seq 2048, micro-batch 1, bf16, activation
# checkpointing) without offload (sharded over 8 GPUs or more, the state fits), at each accumulation
# of ACCUMS (default "1 4": the global batch is GPUs x accumulation sequences). Dry runs only: no GPU,
# no weights, seconds in all. Asserts nothing.
#
#   bash bench/time_plan_scaling.sh                 # from the checkout root, after make build-torch2
#   PROFILE=my-cluster.toml GPUS="16 64 256" bash bench/time_plan_scaling.sh
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${WMTP_BIN_DIR:-$SRC/build-torch2/bin}
PROFILE=${PROFILE:-$SRC/configs/machines/h100-8gpu-ib400.toml}
GPUS=${GPUS:-"8 16 32 64 128 256 512 1024"} ACCUMS=${ACCUMS:-"1 4"}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1  # the config's relative paths (checkpoints/, data/) do not exist here

# "tokens/s per rank" and "exposed communication" of a dry run's time plan.
plan() {
  "$BIN/train-baseline" -c "$SRC/configs/7b-1gpu.toml" --dry-run --world-size "$1" --set sharding.strategy="$2" \
    --set sharding.offload=none --set training.global_batch_size=$(($1 * $3)) \
    --set runtime.machine_profile="$PROFILE" > plan.txt 2>&1 || { echo "- -"; return; }
  local per_rank exposed
  per_rank=$(sed -n 's/^  step .*(\([0-9.e+-]*\) per rank.*/\1/p' plan.txt | head -1)
  exposed=$(sed -n 's/^  exposed communication  *\([0-9.e+-]*\) s.*/\1/p' plan.txt | head -1)
  echo "${per_rank:--} ${exposed:--}"
}

echo "7B MTP (configs/7b-1gpu.toml, offload none), profile $(basename "$PROFILE"); tokens/s per GPU (exposed communication s per step)"
for accum in $ACCUMS; do
  echo
  echo "accumulation $accum (global batch = GPUs x $accum sequences of 2048 tokens)"
  printf '%6s %6s %24s %24s %10s  %s\n' GPUs nodes "full_shard" "hybrid_shard (S = 8)" "hybrid/full" faster
  for n in $GPUS; do
    read -r f_tps f_exp <<< "$(plan "$n" full_shard "$accum")"
    read -r h_tps h_exp <<< "$(plan "$n" hybrid_shard "$accum")"
    ratio=$(python3 -c "print('%.3f' % ($h_tps / $f_tps))" 2>/dev/null || echo -)
    faster=$(python3 -c "print('hybrid' if $h_tps > $f_tps else 'full_shard')" 2>/dev/null || echo -)
    printf '%6s %6s %24s %24s %10s  %s\n' "$n" $((n / 8)) "$f_tps ($f_exp s)" "$h_tps ($h_exp s)" "$ratio" "$faster"
  done
done
