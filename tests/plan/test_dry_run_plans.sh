#!/usr/bin/env bash
# --dry-run plans what a login node without a GPU or the weights can know (the shipped configs):
#  1. train-critic -c configs/critic.toml --world-size 8 plans before the backbone checkpoint exists
#     (its architecture from [model]), the micro-batch this world size needs named in a note;
#  2. runtime.gpu_name plans a GPU run: the 7B config (offload "optimizer") fits an H100 beside a
#     128 GiB node; offload "full" does not fit that node's host memory and the plan names the lever
#     that fits; without offload the 7B does not fit an H100 and the levers say what would;
#  3. the 3B config fits an 80 GB H100 without offload;
#  4. an unknown gpu_name is exit 2 naming the key;
#  5. a budget key out of range (gpu_memory_gib -1, 0.5, 1e30; ranks_per_node -1; host_memory_gib -5)
#     is exit 2 naming the key, never silently replaced by a default;
#  6. device = "cuda" with no budget known (no gpu_name, no gpu_memory_gib, no GPU visible) says
#     "unknown: cannot judge", never "fits";
#  7. every shipped configs/*.toml plans (exit 0, a verdict) with no weights and no data present;
#  8. hybrid_shard at 32 ranks, 8 per node: groups of 8 x 4 replicas, the model state per rank that of
#     full_shard at 8 ranks (1/8 of the model, padded to 32); a group size that does not divide 32, or
#     spans nodes unevenly, is exit 2 naming the numbers, as is shard_group_size under full_shard.
set -uo pipefail
BIN="${WMTP_BIN_DIR:?}"; SRC="${WMTP_SOURCE_DIR:?}"
TMP="$(mktemp -d "${WMTP_TEST_TMP_DIR:-/tmp}/dry_run_plans.XXXXXX")"; trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1  # the configs' relative paths (checkpoints/, data/) must not exist here
source "$SRC/tests/support/checks.sh"
has() { grep -q -- "$2" "$1"; }

"$BIN/train-critic" -c "$SRC/configs/critic.toml" --dry-run --world-size 8 > critic.txt 2>&1; rc=$?
if [ $rc = 0 ] && has critic.txt "does not exist yet: the architecture comes from \[model\]" && has critic.txt "value_head" \
   && has critic.txt "planned with micro_batch_size 12" && has critic.txt "^  total"; then
  ok "critic.toml --world-size 8 without the backbone checkpoint"
else bad "critic.toml --world-size 8 (exit $rc)"; cat critic.txt; fi

H100="--set runtime.gpu_name=H100 --set runtime.host_memory_gib=128"
"$BIN/train-baseline" -c "$SRC/configs/7b-1gpu.toml" --dry-run $H100 > 7b.txt 2>&1; rc=$?
if [ $rc = 0 ] && has 7b.txt "^device: cuda" && has 7b.txt "^fits: device" && has 7b.txt "pinned host (offload)"; then
  ok "7B, offload optimizer, H100 + 128 GiB: fits"
else bad "7B offload optimizer (exit $rc)"; cat 7b.txt; fi

"$BIN/train-baseline" -c "$SRC/configs/7b-1gpu.toml" --dry-run $H100 --set sharding.offload=full > 7b-full.txt 2>&1; rc=$?
if [ $rc = 0 ] && has 7b-full.txt "^does not fit: device .* (fits), host/node .* (> " \
   && grep -q 'offload "optimizer".*<- fits' 7b-full.txt; then
  ok "7B, offload full: too much host memory; offload \"optimizer\" named as the lever that fits"
else bad "7B offload full (exit $rc)"; cat 7b-full.txt; fi

"$BIN/train-baseline" -c "$SRC/configs/7b-1gpu.toml" --dry-run $H100 --set sharding.offload=none > 7b-none.txt 2>&1; rc=$?
if [ $rc = 0 ] && has 7b-none.txt "^does not fit: device .* (> " && grep -q '<- fits' 7b-none.txt; then
  ok "7B without offload on an H100: does not fit; a lever that fits is listed"
else bad "7B offload none (exit $rc)"; cat 7b-none.txt; fi

"$BIN/train-baseline" -c "$SRC/configs/3b-1gpu.toml" --dry-run $H100 > 3b.txt 2>&1; rc=$?
if [ $rc = 0 ] && has 3b.txt "^fits: device" && ! has 3b.txt "pinned host"; then
  ok "3B without offload fits an H100"
else bad "3B (exit $rc)"; cat 3b.txt; fi

"$BIN/train-baseline" -c "$SRC/configs/3b-1gpu.toml" --dry-run --set runtime.gpu_name=B300X > bad.txt 2>&1; rc=$?
if [ $rc = 2 ] && has bad.txt "\[runtime\] gpu_name 'B300X'"; then ok "unknown gpu_name: exit 2 naming the key"
else bad "unknown gpu_name (exit $rc)"; cat bad.txt; fi

for kv in runtime.gpu_memory_gib=-1 runtime.gpu_memory_gib=0.5 runtime.gpu_memory_gib=1e30 \
          runtime.ranks_per_node=-1 runtime.host_memory_gib=-5 runtime.host_memory_gib=1e30; do
  "$BIN/train-baseline" -c "$SRC/configs/7b-1gpu.toml" --dry-run --set runtime.device=cuda --set "$kv" > bad.txt 2>&1; rc=$?
  key=${kv#runtime.}; key=${key%%=*}
  if [ $rc = 2 ] && has bad.txt "\[runtime\] $key" && ! has bad.txt "fits"; then ok "$kv: exit 2: $(tail -1 bad.txt)"
  else bad "$kv (exit $rc, want 2 naming [runtime] $key): $(grep -i 'error\|fits' bad.txt)"; fi
done

# No GPU visible (hidden where there is one: its capacity would be the budget), no gpu_name, no gpu_memory_gib.
CUDA_VISIBLE_DEVICES="" "$BIN/train-baseline" -c "$SRC/configs/7b-1gpu.toml" --dry-run --set runtime.device=cuda \
  --set sharding.offload=none --set runtime.host_memory_gib=1024 > unknown.txt 2>&1; rc=$?
if [ $rc = 0 ] && has unknown.txt "^unknown: cannot judge" && ! has unknown.txt "^fits\|<- fits"; then
  ok "device cuda without a budget: $(grep '^unknown' unknown.txt | cut -c1-90)"
else bad "device cuda without a budget (exit $rc): $(grep -i 'fits\|unknown' unknown.txt)"; fi

HYB="--set runtime.gpu_name=H100 --set runtime.ranks_per_node=8 --set sharding.offload=none --set training.global_batch_size=96"
"$BIN/train-baseline" -c "$SRC/configs/3b-1gpu.toml" --dry-run --world-size 32 $HYB --set sharding.strategy=hybrid_shard \
  > hyb.txt 2>&1; rc=$?
"$BIN/train-baseline" -c "$SRC/configs/3b-1gpu.toml" --dry-run --world-size 8 $HYB > full8.txt 2>&1; rc8=$?
state() { grep -o 'model state [0-9.]* [GMK]iB' "$1" | head -1; }
if [ $rc = 0 ] && [ $rc8 = 0 ] && has hyb.txt "strategy hybrid_shard (groups of 8 x 4 replicas)" && [ -n "$(state hyb.txt)" ] \
   && [ "$(state hyb.txt)" = "$(state full8.txt)" ]; then
  ok "hybrid_shard at 32 ranks, 8 per node: groups of 8 x 4, $(state hyb.txt) per rank as full_shard at 8"
else bad "hybrid_shard plan (exit $rc/$rc8): $(grep 'shard plan\|model state' hyb.txt full8.txt)"; fi
for case in "32 3:does not divide the world size 32" \
            "24 12:would span nodes unevenly: node0 (8 of its 8 ranks) and node1 (4 of its 8 ranks)"; do
  read -r world size <<< "${case%%:*}"
  "$BIN/train-baseline" -c "$SRC/configs/3b-1gpu.toml" --dry-run --world-size "$world" $HYB \
    --set sharding.strategy=hybrid_shard --set sharding.shard_group_size="$size" > bad.txt 2>&1; rc=$?
  if [ $rc = 2 ] && has bad.txt "${case#*:}"; then ok "shard_group_size $size at $world ranks: exit 2: $(grep -o 'shard_group_size.*' bad.txt | cut -c1-100)"
  else bad "shard_group_size $size at $world ranks (exit $rc): $(tail -2 bad.txt)"; fi
done
"$BIN/train-baseline" -c "$SRC/configs/3b-1gpu.toml" --dry-run --world-size 32 $HYB --set sharding.shard_group_size=8 \
  > bad.txt 2>&1; rc=$?
if [ $rc = 2 ] && has bad.txt 'shard_group_size = 8 applies to strategy = "hybrid_shard"'; then
  ok "shard_group_size under full_shard: exit 2 naming the key"
else bad "shard_group_size under full_shard (exit $rc): $(tail -2 bad.txt)"; fi

# Every shipped config plans before its weights exist: the cluster ones with no data either (a login
# node), the tiny ones beside the tiny datasets they are preprocessed from (their vocabulary is the
# data's tokenizer's). 8 ranks divide every config's global batch.
TINY=${WMTP_TINY_DATA_DIR:?set by ctest: the tiny datasets of the data fixture}
for c in "$SRC"/configs/*.toml; do
  name=$(basename "$c" .toml)
  case $name in *critic*) prog=train-critic ;; *rho1*) prog=train-rho1 ;; *verifiable*) prog=train-verifiable ;;
                 *) prog=train-baseline ;; esac
  data=(); case $name in tiny*) data=(--set data.train="$TINY/train.h5" --set data.valid="$TINY/valid.h5") ;; esac
  "$BIN/$prog" -c "$c" --dry-run --world-size 8 "${data[@]}" > "plan-$name.txt" 2>&1; rc=$?
  if [ $rc = 0 ] && grep -q "^fits: \|^does not fit: \|^unknown: cannot judge" "plan-$name.txt"; then
    ok "$prog -c configs/$name.toml --dry-run --world-size 8 without weights: $(grep -o '^fits\|^does not fit\|^unknown: cannot judge' "plan-$name.txt")"
  else bad "configs/$name.toml --dry-run --world-size 8 (exit $rc): $(tail -2 "plan-$name.txt")"; fi
done
# README's own example, as written there.
example=$(grep -o 'bin/train-[a-z]* -c configs/[a-z0-9_-]*\.toml --dry-run --world-size [0-9]*' "$SRC/README.md" | head -1)
if [ -z "$example" ]; then bad "README has no --dry-run --world-size example"
elif read -ra w <<< "$example" && "$BIN/${w[0]#bin/}" -c "$SRC/${w[2]}" "${w[@]:3}" > readme.txt 2>&1; then
  ok "README's example plans without weights: $example"
else bad "README's example: $example: $(tail -1 readme.txt)"; fi
checks_finish
