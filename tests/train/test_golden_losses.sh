#!/usr/bin/env bash
# Golden losses: the first 10 training losses of each tiny pipeline — train-baseline, train-rho1,
# train-critic, train-verifiable — at np 1 and np 2 (fp32, CPU), against tests/train/golden_losses.txt,
# each within 1e-6 relative. A refactor that is meant to leave the numbers alone must leave these.
# When a change is meant to move them, regenerate the file and commit it with the change:
#   WMTP_UPDATE_GOLDEN=1 ctest --test-dir build-torch2 -R test_golden_losses
# The runs pin the CPU kernels to AVX2 (ATen's dispatch, MKL, oneDNN), so a machine with AVX-512
# computes what one without it does. Runs in the PyTorch 2.x leg only: Debian's LibTorch 1.13 has
# other kernels, and the numbers are recorded from the 2.x build.
source "$(dirname "$0")/e2e_lib.sh"
e2e_setup golden_losses
export ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
GOLDEN=$SRC/tests/train/golden_losses.txt
data=(--set data.train="$DATA/train.h5" --set data.valid="" --set logging.peak_tflops=1.0 --set logging.log_interval=1
      --set checkpoint.every=0 --set checkpoint.save_final=true --set training.max_steps=10)
# train PROGRAM NAME NP ARGS...: a 10-step run under $TMP/NAME; its losses appended to got.txt as
# "NAME np NP STEP LOSS" (the name says which pipeline)
train() {
  local prog=$1 name=$2 np=$3; shift 3
  if $MPI -np "$np" "$BIN/$prog" "$@" "${data[@]}" --set checkpoint.dir="$TMP/$name-np$np/ckpt" \
       --set training.run_dir="$TMP/$name-np$np" > "$TMP/$name-np$np.log" 2>&1; then
    losses "$name-np$np" | awk -v n="$name" -v np="$np" '{print n, "np", np, $1, $2}' >> got.txt
  else bad "$prog at np $np failed"; tail -5 "$TMP/$name-np$np.log"; fi
}
: > got.txt
for np in 1 2; do train train-baseline baseline "$np" -c "$SRC/configs/tiny.toml"; done
# what the other pipelines read: a merged backbone (the np-2 baseline), rho1's one-head reference,
# verifiable's critic (the np-2 critic run)
"$BIN/merge-lora" --base "$TMP/baseline-np2/ckpt/step_00000010.h5" --output "$TMP/backbone.h5" > merge.log 2>&1 \
  || { bad "merge-lora"; tail -5 merge.log; }
train train-baseline reference 2 -c "$SRC/configs/tiny.toml" --set model.n_future_tokens=1 --set model.n_layers=3 \
  --set lora.enabled=false --set optimizer.lr=3e-3
for np in 1 2; do
  train train-rho1 rho1 "$np" -c "$SRC/configs/tiny-rho1.toml" --set rho1.reference="$TMP/reference-np2/ckpt"
  train train-critic critic "$np" -c "$SRC/configs/tiny-critic.toml" --set training.init_weights="$TMP/backbone.h5" \
    --set checkpoint.lora_only=true
done
for np in 1 2; do
  train train-verifiable verifiable "$np" -c "$SRC/configs/tiny-verifiable.toml" \
    --set verifiable.critic="$TMP/critic-np2/ckpt" --set training.init_weights="$TMP/backbone.h5"
done
grep -v '^reference ' got.txt > got_golden.txt  # the reference is an input, not a pipeline of its own

if [ -n "${WMTP_UPDATE_GOLDEN:-}" ]; then
  { echo "# The first 10 losses of each tiny pipeline (tests/train/test_golden_losses.sh), PyTorch 2.x LibTorch,"
    echo "# CPU kernels pinned to AVX2. Regenerate: WMTP_UPDATE_GOLDEN=1 ctest --test-dir build-torch2 -R test_golden_losses"
    echo "# pipeline np ranks step loss"
    cat got_golden.txt; } > "$GOLDEN"
  echo "wrote $GOLDEN ($(wc -l < got_golden.txt) losses)"
  bad "WMTP_UPDATE_GOLDEN is set: the file was rewritten, nothing was checked (unset it to test)"
  e2e_finish; exit
fi
python3 - "$GOLDEN" got_golden.txt <<'PY' && ok "every loss within 1e-6 relative of the golden file" || bad "losses moved (table above)"
import sys
def read(path):
    out = {}
    for line in open(path):
        if line.startswith("#") or not line.strip(): continue
        name, _, np_, step, loss = line.split()
        out[(name, int(np_), int(step))] = float(loss)
    return out
want, got = read(sys.argv[1]), read(sys.argv[2])
moved = 0
print(f"{'pipeline':<11} {'np':>2} {'step':>4} {'golden':>20} {'now':>20} {'rel':>9}")
for key in sorted(set(want) | set(got)):
    w, g = want.get(key), got.get(key)
    rel = abs(g - w) / abs(w) if w is not None and g is not None else float("inf")
    flag = "" if rel <= 1e-6 else "  <- moved" if g is not None and w is not None else "  <- missing"
    moved += bool(flag)
    print(f"{key[0]:<11} {key[1]:>2} {key[2]:>4} {w!r:>20} {g!r:>20} {rel:9.1e}{flag}")
print(f"{len(want)} golden losses, {moved} moved or missing")
sys.exit(1 if moved or len(want) < 80 else 0)
PY
e2e_finish
