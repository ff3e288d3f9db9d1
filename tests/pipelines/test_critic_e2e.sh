#!/usr/bin/env bash
# train-critic end to end on the bundled corpus (configs/tiny-critic.toml):
#  0. the backbone: train-baseline (configs/tiny.toml, 40 steps, np 2) + merge-lora -> an MTP model
#     whose trunk + head 0 the critic reads.
#  1. 60 critic steps at np 2 (LoRA + mlp value head, pairwise loss, adapters-only checkpoints every
#     20): the validation loss falls and the pairwise accuracy ends clearly above chance; the
#     reference's metric names are there.
#  2. the same run, one rank killed with kill -9 after the step-20 checkpoint, restarted with
#     resume = "auto": losses of steps 21-60 bitwise equal to the reference.
#  3. the step-20 checkpoint (saved at np 2) resumed at np 1 and np 4: steps 21-25 within 1e-5
#     (summation-order rounding at 1e-8 grows about threefold a step under AdamW at this lr: by step
#     30 some draws reach 1e-5 with no fault, e.g. main at training.seed = 3 gave 1.2e-5, while a
#     resharding fault shows from step 21 or 22).
#  4. convert-checkpoint export: the value head as value_head.safetensors + value_head_config.json
#     beside the merged backbone (HF names, no lm_head) and beside the PEFT adapters.
#  5. --dry-run, --print-config; config mistakes are exit 2 naming the key.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/../train/e2e_lib.sh"
e2e_setup critic_e2e
data=(--set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5" --set logging.peak_tflops=1.0)

# 0. backbone
if $MPI -np 2 "$BIN/train-baseline" -c "$SRC/configs/tiny.toml" "${data[@]}" --set checkpoint.dir="$TMP/policy/ckpt" \
     --set training.run_dir="$TMP/policy" --set checkpoint.every=0 > "$TMP/policy.log" 2>&1 \
   && "$BIN/merge-lora" --base "$TMP/policy/ckpt/step_00000040.h5" --output "$TMP/backbone.h5" > "$TMP/merge.log" 2>&1; then
  ok "backbone: tiny MTP policy (40 steps) merged"
else bad "backbone"; tail -20 "$TMP/policy.log" "$TMP/merge.log"; fi

common=(-c "$SRC/configs/tiny-critic.toml" "${data[@]}" --set training.init_weights="$TMP/backbone.h5"
        --set training.max_steps=60 --set training.eval_every=20 --set checkpoint.every=20 --set checkpoint.keep_last=0
        --set checkpoint.lora_only=true --set logging.log_interval=1)
PROGRAM=train-critic  # run NAME NP [args...] (e2e_lib.sh): checkpoints and metrics under $TMP/NAME

# 1. reference: it learns
if run ref 2; then ok "reference critic run (np 2, 60 steps)"; else bad "reference run"; tail -30 "$TMP/ref.log"; fi
# Host reads per step: one, whatever the accumulation — the loss and metric sums of every micro-batch stay on
# the device until they are read with the gradient norm (train_step).
host_syncs ref 1 && ok "one host sync per step" || bad "host syncs per step: a read of a device value came back"
python3 - "$TMP/ref/metrics.jsonl" <<'PY' && ok "validation loss falls, accuracy above chance, metric names" || bad "critic did not learn"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "train/loss" in r]
val = [r for r in rows if "val/loss" in r]
keys = ["train/loss", "train/pairwise_accuracy", "train/value_head_lr", "train/lora_lr", "value/mean_pos",
        "value/mean_neg", "value/margin", "value/pos_token_variance", "value/neg_token_variance", "value/pos_spikiness",
        "value/neg_spikiness", "value/pos_mean_abs_td", "value/neg_mean_abs_td", "value/pos_position_corr",
        "value/neg_position_corr", "train/grad_norm", "perf/tokens_per_sec"]
missing = [k for k in keys if k not in train[-1]]
assert not missing, f"missing train keys {missing}"
for k in ["val/loss", "val/pairwise_accuracy", "val/margin", "val/pos_token_variance", "val/pos_spikiness",
          "val/pos_mean_abs_td", "val/neg_position_corr"]:
    assert k in val[-1], f"missing {k}"
assert [r["step"] for r in train] == list(range(1, 61)), "train steps"
curve = [(r["step"], round(r["val/loss"], 4), round(r["val/pairwise_accuracy"], 4)) for r in val]
print("validation (step, loss, pairwise accuracy):", curve)
first, last = val[0], val[-1]
assert abs(train[0]["train/loss"] - 0.6931) < 1e-3, "initial loss is log 2 (last layer zero: v = bias for all)"
assert last["val/loss"] < 0.62 and last["val/loss"] < first["val/loss"] - 0.05, "validation loss did not fall"
assert last["val/margin"] > 0.1, "no margin between correct and incorrect"
assert last["val/pairwise_accuracy"] >= 0.64, "validation pairwise accuracy not above chance"
PY
[ -f "$TMP/ref/ckpt/step_00000060.h5" ] && ok "final checkpoint" || bad "final checkpoint"

# 2. kill -9 one rank after the step-20 checkpoint, then resume = auto
kill_one_rank train-critic killed 20 60
cp "$TMP/killed/ckpt/step_00000020.h5" "$TMP/step20.h5"
restart killed
losses ref | awk '$1>20' > "$TMP/ref_tail.txt"; losses killed | awk '$1>20' > "$TMP/killed_tail.txt"
if [ "$(wc -l < "$TMP/ref_tail.txt")" = 40 ] && diff "$TMP/ref_tail.txt" "$TMP/killed_tail.txt" > "$TMP/diff.txt"; then
  ok "steps 21-60 bitwise equal after kill -9 + resume"; else bad "losses differ after resume"; cat "$TMP/diff.txt"; fi

# 3. the step-20 checkpoint saved at np 2, resumed at np 1 and np 4
for np in 1 4; do
  mkdir -p "$TMP/np$np/ckpt"; cp "$TMP/step20.h5" "$TMP/np$np/ckpt/step_00000020.h5"
  echo step_00000020.h5 > "$TMP/np$np/ckpt/latest"
  # np 4 saves a full checkpoint (base + adapters + head) for the export below
  extra=(); [ "$np" = 4 ] && extra=(--set checkpoint.lora_only=false)
  if run "np$np" "$np" --set training.stop_after_steps=10 "${extra[@]}"; [ $? = 75 ]; then
    d=""
    if [ "$(losses "np$np" | awk '$1 > 20' | wc -l)" = 10 ] && d=$(loss_diff ref "np$np" 21 25 1e-5); then
      ok "np 2 checkpoint resumed at np $np: steps 21-25 within 1e-5 (rel diff $d)"
    else bad "resume at np $np: steps $(losses "np$np" | awk '{printf "%s ", $1}')rel diff ${d:-none}"; fi
  else bad "run at np $np"; tail -20 "$TMP/np$np.log"; fi
done

# 4. export: value head beside the backbone (a full critic checkpoint, merged) and beside the PEFT
#    adapters (the adapters-only checkpoint)
final="$TMP/ref/ckpt/step_00000060.h5"
if "$BIN/merge-lora" --base "$TMP/np4/ckpt/step_00000030.h5" --output "$TMP/critic_merged.h5" > "$TMP/merge2.log" 2>&1 \
   && "$BIN/convert-checkpoint" export --input "$TMP/critic_merged.h5" --output "$TMP/export" --names hf > "$TMP/export.log" 2>&1 \
   && "$BIN/convert-checkpoint" export --input "$final" --output "$TMP/peft" --format peft > "$TMP/peft.log" 2>&1; then
  python3 - "$TMP/export" "$TMP/peft" <<'PY' && ok "export: value head safetensors + config beside the backbone and the adapters" || bad "export contents"
import json, struct, sys, os
def names(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return {k: v for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}
for d in sys.argv[1:]:
    head = names(os.path.join(d, "value_head.safetensors"))
    assert set(head) == {"mlp.0.weight", "mlp.0.bias", "mlp.3.weight", "mlp.3.bias", "mlp.6.weight", "mlp.6.bias"}, head
    assert head["mlp.0.weight"]["shape"] == [16, 64] and head["mlp.6.weight"]["shape"] == [1, 8], head
    cfg = json.load(open(os.path.join(d, "value_head_config.json")))
    assert cfg["type"] == "mlp" and cfg["hidden_size"] == 64, cfg
assert json.load(open(os.path.join(sys.argv[2], "value_head_config.json")))["dropout"] == 0.0  # from /value_head
model = names(os.path.join(sys.argv[1], "model.safetensors"))
assert "lm_head.weight" not in model and not any(k.startswith("value_head") for k in model), sorted(model)[:5]
assert "model.norm.weight" in model and "model.layers.2.self_attn.q_proj.weight" in model
assert not any("layers.3" in k for k in model), "the value backbone has 3 blocks (trunk + head 0)"
print("backbone tensors:", len(model))
PY
else bad "merge / export"; tail -5 "$TMP/merge2.log" "$TMP/export.log" "$TMP/peft.log"; fi

# 5. dry run, print-config, config mistakes
"$BIN/train-critic" "${common[@]}" --dry-run --world-size 4 > "$TMP/dry.txt" 2>&1 && grep -q "value_head" "$TMP/dry.txt" \
  && ! grep -q "^output " "$TMP/dry.txt" && ok "--dry-run --world-size 4 (value_head unit, no output unit)" \
  || { bad "--dry-run"; cat "$TMP/dry.txt"; }
"$BIN/train-critic" "${common[@]}" --print-config > "$TMP/print.txt" 2>&1 && grep -q '^\[critic\]' "$TMP/print.txt" \
  && ok "--print-config has [critic]" || bad "--print-config"
"$BIN/train-critic" "${common[@]}" --set model.dim=32 > "$TMP/bad1.txt" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "\[model\] dim" "$TMP/bad1.txt" && ok "[model] dim beside a backbone checkpoint: exit 2 naming the key" \
  || { bad "[model] dim: exit $rc"; cat "$TMP/bad1.txt"; }
"$BIN/train-critic" "${common[@]}" --set 'optimizer.group_patterns=["*norm*"]' --set 'optimizer.group_lr=[1e-3]' \
  --set 'optimizer.group_weight_decay=[0.0]' > "$TMP/bad2.txt" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "group_patterns" "$TMP/bad2.txt" && ok "own [optimizer] groups: exit 2 naming the key" \
  || { bad "[optimizer] groups: exit $rc"; cat "$TMP/bad2.txt"; }

e2e_finish
