#!/usr/bin/env bash
# Golden losses: the first 10 steps' train/*loss* metrics of every pipeline (train-baseline, -rho1,
# -critic, -verifiable) on the tiny configs and datasets, fp32 on the CPU, each run at np 1, 2 and 4
# against the one series per pipeline in golden_losses.torch<MAJOR>.json beside this script (to 1e-6
# of its magnitude taken as at least 1): the rank count sums in another order, within that tolerance.
# A change that moves a number it did not mean to move fails here with a table of what moved, and
# every run prints its largest difference. A change meant to move them regenerates the file from the
# np 1 runs, and the np 2 and 4 runs are then held to it (docs/architecture.md, "Golden losses"):
#   WMTP_UPDATE_GOLDEN=1 ctest --test-dir build-torch2 -R test_golden_losses
# The file is per LibTorch major version (WMTP_TORCH_MAJOR, from CMake): kernels differ between 1.13 and
# 2.x in the last bits. A version without a file fails (run the line above in that build tree).
# File: {"PIPELINE": {"steps": [1, ..., 10], "train/loss": [one value per step], ...}, ...}.
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

NPS="1 2 4"
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
steps = sorted(last)
keys = sorted(set().union(*last.values())) if last else []
print(json.dumps({"steps": steps, **{k: [last[s].get(k) for s in steps] for k in keys}}))
PY
}
# golden_all PIPELINE NAME: the run NAME<np> at every rank count of NPS
golden_all() { local np; for np in $NPS; do golden "$1" "$2$np" "$np"; done; }

# train-baseline (tiny.toml: LoRA, 4 heads); its np 2 run is the critic's backbone
PROGRAM=train-baseline; common=(-c "$SRC/configs/tiny.toml" "${data[@]}")
golden_all baseline baseline
"$BIN/merge-lora" --base "$TMP/baseline2/ckpt/step_000000$STEPS.h5" --output "$TMP/backbone.h5" > "$TMP/merge.log" 2>&1 \
  && ok "backbone merged" || bad "merge-lora"

# train-rho1 against a 2-step single-head reference (as test_rho1_e2e, shorter)
PROGRAM=train-baseline
common=(-c "$SRC/configs/tiny.toml" "${data[@]}" --set model.n_future_tokens=1 --set model.n_layers=3
        --set lora.enabled=false --set optimizer.lr=3e-3)
run ref 2 --set training.max_steps=2 --set checkpoint.every=0 && ok "rho1 reference" || bad "rho1 reference"
PROGRAM=train-rho1; common=(-c "$SRC/configs/tiny-rho1.toml" "${data[@]}" --set rho1.reference="$TMP/ref/ckpt")
golden_all rho1 rho1_

# train-critic on the baseline's merged backbone; its np 2 run is the verifiable pipeline's critic
PROGRAM=train-critic
common=(-c "$SRC/configs/tiny-critic.toml" "${data[@]}" --set training.init_weights="$TMP/backbone.h5"
        --set checkpoint.lora_only=true)
golden_all critic critic

PROGRAM=train-verifiable
common=(-c "$SRC/configs/tiny-verifiable.toml" "${data[@]}" --set verifiable.critic="$TMP/critic2/ckpt"
        --set training.init_weights="$TMP/backbone.h5")
golden_all verifiable verifiable

if [ "${WMTP_UPDATE_GOLDEN:-0}" = 1 ]; then
  if [ "$fails" = 0 ]; then
    python3 - "$TMP/got" > "$GOLDEN.new" <<'PY' && mv "$GOLDEN.new" "$GOLDEN" && ok "wrote $GOLDEN from the np 1 runs (review and commit it)" \
      || { rm -f "$GOLDEN.new"; bad "$GOLDEN not written"; }
import json, os, sys
d = sys.argv[1]
series = {f[:-len(".np1.json")]: json.load(open(os.path.join(d, f))) for f in sorted(os.listdir(d)) if f.endswith(".np1.json")}
# one line per series: a change to the numbers reads as the lines of the series it moved
print("{\n" + ",\n".join(f" {json.dumps(p)}: {{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(s.items()))
                          + "\n }" for p, s in sorted(series.items())) + "\n}")
PY
  else bad "runs failed: $GOLDEN not written"; fi
fi

# The comparison: every run (each pipeline at each rank count) has the golden steps and every golden
# number within 1e-6 of its magnitude, taken as at least 1: the losses (0.69 and up) are held to 1e-6
# relative; rho1's excess losses, differences of near-equal CEs around 1e-3, to 1e-6 absolute, since a
# last-bit change in either CE moves them far more in relative terms. Prints each run's largest
# difference, and a table of those that moved.
python3 - "$GOLDEN" "$TMP/got" "$NPS" <<'PY' && ok "every run within 1e-6 of $(basename "$GOLDEN")" || bad "losses moved (table above)"
import json, os, sys
try:
    golden = json.load(open(sys.argv[1]))
except OSError as e:
    sys.exit(f"no golden file for this LibTorch: {e}; WMTP_UPDATE_GOLDEN=1 writes it")
d, nps = sys.argv[2], sys.argv[3].split()
got = {f[:-5]: json.load(open(os.path.join(d, f))) for f in os.listdir(d)}
moved, compared, problems = [], 0, []
for pipeline, want in sorted(golden.items()):
    steps = want.get("steps")
    if not isinstance(steps, list) or not steps:
        problems.append(f"{pipeline}: no list of steps in the golden file")
        continue
    worst = []
    for np in nps:
        run = f"{pipeline}.np{np}"
        have = got.pop(run, None)
        if have is None:
            problems.append(f"{run}: no losses (the run failed)")
            continue
        if have.get("steps") != steps:
            problems.append(f"{run}: steps {have.get('steps')}, golden {steps}")
            continue
        top = 0.0
        for key, values in sorted(want.items()):
            if key == "steps":
                continue
            for step, w, h in zip(steps, values, have.get(key, [None] * len(steps))):
                compared += 1
                rel = float("inf") if h is None else abs(h - w) / max(abs(w), 1.0)
                top = max(top, rel)
                if not rel <= 1e-6:
                    moved.append((run, step, key, w, h, rel))
        worst.append(f"np {np} {top:.2e}")
    print(f"{pipeline}: largest difference from the golden series: {', '.join(worst)}")
problems += [f"{run}: a run without golden numbers" for run in sorted(got)]
print(f"{compared} golden losses compared, {len(moved)} moved")
for p in problems:
    print(p)
if moved:
    print(f"{'run':<16}{'step':>5}  {'metric':<28}{'golden':>22}{'now':>22}{'rel diff':>11}")
    for run, step, key, want, have, rel in moved:
        print(f"{run:<16}{step:>5}  {key:<28}{want:>22.15g}{'missing' if have is None else f'{have:.15g}':>22}{rel:>11.2e}")
sys.exit(1 if moved or problems or not compared else 0)
PY
e2e_finish
