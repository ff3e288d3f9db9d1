#!/usr/bin/env bash
# Golden losses: the first 10 steps' train/*loss* metrics of every pipeline (train-baseline, -rho1,
# -critic, -verifiable) on the tiny configs and datasets, fp32 on the CPU, at np 1 and np 2, against
# golden_losses.torch<MAJOR>.json beside this script (to 1e-6 relative). A change that moves a number it
# did not mean to move fails here with a table of what moved. A change meant to move them regenerates the
# file (docs/architecture.md, "Golden losses"):
#   WMTP_UPDATE_GOLDEN=1 ctest --test-dir build-torch2 -R test_golden_losses
# The file is per LibTorch major version (WMTP_TORCH_MAJOR, from CMake): kernels differ between 1.13 and
# 2.x in the last bits. A version without a file fails (run the line above in that build tree).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_setup golden_losses
# The CPU kernels pinned to AVX2 (ATen's dispatch, MKL, oneDNN): a machine with AVX-512 then computes
# what one without it does (measured on this project's AVX-512 machine, unpinned: the baseline's
# step-10 loss moves by 5e-9 relative, rho1's excess losses, differences of near-equal CEs, by up to 4e-4).
export ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
MAJOR=${WMTP_TORCH_MAJOR:?set by ctest: the LibTorch major version}
GOLDEN=$E2E_LIB_DIR/golden_losses.torch$MAJOR.json
STEPS=10
data=(--set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5" --set logging.peak_tflops=1.0
      --set runtime.device=cpu --set training.eval_every=0 --set data.val_n_samples=4 --set checkpoint.keep_last=0
      --set logging.log_interval=1)
steps=(--set training.max_steps=$STEPS --set checkpoint.every=0)

# golden PIPELINE NAME NP: $PROGRAM's run NAME at NP ranks; its losses go to $TMP/got/PIPELINE.npNP.json
mkdir -p "$TMP/got"
golden() {
  if run "$2" "$3" "${steps[@]}"; then ok "$1 np $3 ($STEPS steps)"
  else bad "$1 np $3"; tail -20 "$TMP/$2.log"; return 1; fi
  python3 - "$TMP/$2/metrics.jsonl" > "$TMP/got/$1.np$3.json" <<'PY'
import json, sys
last = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "train/loss" in r:  # a training record; per-head and per-part losses where the pipeline logs them
        last[r["step"]] = {k: v for k, v in r.items() if k.startswith("train/") and "loss" in k}
print(json.dumps({str(s): last[s] for s in sorted(last)}))
PY
}

# train-baseline (tiny.toml: LoRA, 4 heads); its np 2 run is the critic's backbone
PROGRAM=train-baseline; common=(-c "$SRC/configs/tiny.toml" "${data[@]}")
golden baseline baseline1 1; golden baseline baseline2 2
"$BIN/merge-lora" --base "$TMP/baseline2/ckpt/step_000000$STEPS.h5" --output "$TMP/backbone.h5" > "$TMP/merge.log" 2>&1 \
  && ok "backbone merged" || bad "merge-lora"

# train-rho1 against a 2-step single-head reference (as test_rho1_e2e, shorter)
PROGRAM=train-baseline
common=(-c "$SRC/configs/tiny.toml" "${data[@]}" --set model.n_future_tokens=1 --set model.n_layers=3
        --set lora.enabled=false --set optimizer.lr=3e-3)
run ref 2 --set training.max_steps=2 --set checkpoint.every=0 && ok "rho1 reference" || bad "rho1 reference"
PROGRAM=train-rho1; common=(-c "$SRC/configs/tiny-rho1.toml" "${data[@]}" --set rho1.reference="$TMP/ref/ckpt")
golden rho1 rho1_1 1; golden rho1 rho1_2 2

# train-critic on the baseline's merged backbone; its np 2 run is the verifiable pipeline's critic
PROGRAM=train-critic
common=(-c "$SRC/configs/tiny-critic.toml" "${data[@]}" --set training.init_weights="$TMP/backbone.h5"
        --set checkpoint.lora_only=true)
golden critic critic1 1; golden critic critic2 2

PROGRAM=train-verifiable
common=(-c "$SRC/configs/tiny-verifiable.toml" "${data[@]}" --set verifiable.critic="$TMP/critic2/ckpt"
        --set training.init_weights="$TMP/backbone.h5")
golden verifiable verifiable1 1; golden verifiable verifiable2 2

if [ "${WMTP_UPDATE_GOLDEN:-0}" = 1 ]; then
  if [ "$fails" = 0 ]; then
    python3 - "$TMP/got" > "$GOLDEN" <<'PY'
import json, os, sys
d = sys.argv[1]
runs = {f[:-5]: json.load(open(os.path.join(d, f))) for f in sorted(os.listdir(d))}
print(json.dumps(runs, indent=1, sort_keys=True))
PY
    ok "wrote $GOLDEN (review and commit it)"
  else bad "runs failed: $GOLDEN not written"; fi
  e2e_finish; exit
fi

# The comparison: every golden number present and within 1e-6 of its magnitude, taken as at least 1:
# the losses (0.69 and up) are held to 1e-6 relative; rho1's excess losses, differences of near-equal
# CEs around 1e-3, to 1e-6 absolute, since a last-bit change in either CE moves them far more in
# relative terms. A table of those that moved.
python3 - "$GOLDEN" "$TMP/got" <<'PY' && ok "every loss within 1e-6 relative of $(basename "$GOLDEN")" || bad "losses moved (table above)"
import json, os, sys
try:
    golden = json.load(open(sys.argv[1]))
except OSError as e:
    sys.exit(f"no golden file for this LibTorch: {e}; WMTP_UPDATE_GOLDEN=1 writes it")
d = sys.argv[2]
got = {f[:-5]: json.load(open(os.path.join(d, f))) for f in os.listdir(d)}
moved, compared = [], 0
for run, steps in sorted(golden.items()):
    for step, keys in sorted(steps.items(), key=lambda kv: int(kv[0])):
        for key, want in sorted(keys.items()):
            have = got.get(run, {}).get(step, {}).get(key)
            compared += 1
            rel = float("inf") if have is None else abs(have - want) / max(abs(want), 1.0)
            if not rel <= 1e-6: moved.append((run, step, key, want, have, rel))
extra = sorted(set(got) - set(golden))
print(f"{compared} golden losses compared, {len(moved)} moved" + (f"; runs without golden numbers: {extra}" if extra else ""))
if moved:
    print(f"{'run':<16}{'step':>5}  {'metric':<28}{'golden':>22}{'now':>22}{'rel diff':>11}")
    for run, step, key, want, have, rel in moved:
        print(f"{run:<16}{step:>5}  {key:<28}{want:>22.15g}{'missing' if have is None else f'{have:.15g}':>22}{rel:>11.2e}")
sys.exit(1 if moved or extra else 0)
PY
e2e_finish
