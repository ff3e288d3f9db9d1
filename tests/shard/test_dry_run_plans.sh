#!/usr/bin/env bash
# --dry-run plans what a login node without a GPU or the weights can know (the shipped configs):
#  1. train-critic -c configs/critic.toml --world-size 8 plans before the backbone checkpoint exists
#     (its architecture from [model]), the micro-batch this world size needs named in a note;
#  2. runtime.gpu_name plans a GPU run: the 7B config (offload "optimizer") fits an H100 beside a
#     128 GiB node; offload "full" does not fit that node's host memory and the plan names the lever
#     that fits; without offload the 7B does not fit an H100 and the levers say what would;
#  3. the 3B config fits an 80 GB H100 without offload;
#  4. an unknown gpu_name is exit 2 naming the key.
set -uo pipefail
BIN="${WMTP_BIN_DIR:?}"; SRC="${WMTP_SOURCE_DIR:?}"
TMP="$(mktemp -d "${WMTP_TEST_TMP_DIR:-/tmp}/dry_run_plans.XXXXXX")"; trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1  # the configs' relative paths (checkpoints/, data/) must not exist here
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
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
exit $fail
