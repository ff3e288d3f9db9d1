#!/usr/bin/env bash
# The HF round trip against transformers and peft themselves ($WMTP_PYTHON, offline), on a tiny run:
#  1. train-baseline fine-tunes the tiny MTP model fully for 3 steps (the base), then trains LoRA
#     adapters on it for 3 steps (adapters-only checkpoint);
#  2. convert-checkpoint exports the base as HF safetensors + config.json and the adapters as PEFT;
#  3. transformers' LlamaForCausalLM loads the export, peft's PeftModel the adapters on it: their
#     logits equal wmtp's own (ckpt_logits: the HDF5 checkpoints through MtpModel's forward, LoRA
#     unmerged, head 0; never the export) within fp32 tolerance — and the adapters do move them;
#  4. the adapters edited on the Python side (seeded noise on every lora_A / lora_B, save_pretrained)
#     come back through merge-lora (logits equal peft's merge_and_unload) and through
#     convert-checkpoint import --from peft (logits equal PeftModel's, unmerged on both sides); each
#     adapter moves the logits by far more than the tolerance (no vacuous match).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../train/e2e_lib.sh"
e2e_setup hf_roundtrip
export PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # no hub: everything is local
PY=${WMTP_PYTHON:?set by ctest: the Python with the real peers (scripts/setup.sh)}
LOGITS=${WMTP_CKPT_LOGITS:?set by ctest: the ckpt_logits helper}
"$PY" -c 'import transformers, peft, safetensors' || { echo "FAIL $PY cannot import transformers, peft and safetensors (scripts/setup.sh installs them)"; exit 1; }
peer() { "$PY" "$SRC/tests/ckpt/hf_peer.py" "$@"; }
step() {  # step MSG CMD...: runs CMD (output in $TMP/steps.log); a failure is one FAIL line with its output
  local msg=$1; shift
  if "$@" > "$TMP/step.log" 2>&1; then cat "$TMP/step.log" >> "$TMP/steps.log"; ok "$msg"
  else bad "$msg"; tail -20 "$TMP/step.log"; fi
}
train() {  # train NAME [--set ...]: 3 steps of one 4-sequence micro-batch, the step-3 checkpoint kept
  local name=$1; shift
  "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="" \
    --set training.global_batch_size=4 --set training.max_steps=3 --set checkpoint.every=3 --set checkpoint.keep_last=0 \
    --set logging.tensorboard=false --set training.run_dir="$TMP/$name" --set checkpoint.dir="$TMP/$name/ckpt" "$@"
}

# 1. a base and adapters trained on it
BASE=$TMP/full/ckpt/step_00000003.h5 LORA=$TMP/lora/ckpt/step_00000003.h5
step "a 3-step full fine-tune (the base)" train full --set lora.enabled=false
step "3 steps of LoRA adapters on it (adapters only)" train lora --set training.init_weights="$BASE" --set checkpoint.lora_only=true

# 2. exports
step "export HF" "$BIN/convert-checkpoint" export --input "$BASE" --output "$TMP/hf" --names hf
step "export PEFT" "$BIN/convert-checkpoint" export --input "$LORA" --output "$TMP/peft" --format peft

# 3. transformers and peft on the exports (one Python process: its imports dominate the test's time)
cd "$TMP" || exit 1
step "transformers and peft: logits of the exports; the adapters edited in Python, save_pretrained" peer peers hf peft . 7
grep '^  peft' "$TMP/step.log"

# 4. wmtp's own logits, of the checkpoints and of the edited adapters brought back
step "merge-lora of the edited adapters into the base" "$BIN/merge-lora" --base "$BASE" --lora edited --output merged.h5
step "import --from peft of the edited adapters" "$BIN/convert-checkpoint" import --from peft --input edited --base "$BASE" --output edited.h5
ours() {  # ours WEIGHTS OUT [BASE]: ckpt_logits
  step "wmtp logits of ${1#$TMP/}${3:+ (LoRA unmerged on its base)}" "$LOGITS" "$1" tokens.safetensors "$2" ${3:+"$3"}
}
ours "$BASE" ours_base.safetensors
ours "$LORA" ours_lora.safetensors "$BASE"
ours merged.h5 ours_merged.safetensors
ours edited.h5 ours_edited.safetensors "$BASE"
n=0
while IFS= read -r line; do
  case $line in "ok   "*) ok "${line#ok   }"; n=$((n+1));; "FAIL "*) bad "${line#FAIL }";; *) echo "  $line";; esac
done < <(peer compare ours_base.safetensors:hf_base.safetensors="transformers LlamaForCausalLM on the HF export = wmtp" \
  ours_lora.safetensors:peft_lora.safetensors:hf_base.safetensors="peft PeftModel with the exported adapters = wmtp (unmerged)" \
  ours_merged.safetensors:peft_merged.safetensors:peft_lora.safetensors="edited adapters: merge-lora = peft merge_and_unload" \
  ours_edited.safetensors:peft_edited.safetensors:peft_lora.safetensors="edited adapters: import --from peft = PeftModel (unmerged)" 2>&1)
[ "$n" = 4 ] || bad "$n of the 4 logit comparisons passed"
e2e_finish
