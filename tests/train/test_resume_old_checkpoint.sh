#!/usr/bin/env bash
# Old checkpoints still resume: tests/train/data/checkpoint_b96bf18/step_00000002.h5 is a tiny
# train-baseline checkpoint (dim 16, 2 heads, with optimizer state) written by main before the
# trainer's state became a list of components (train/checkpointed.h). Resuming it at np 1 must pick
# up step 2, the data cursor and the lr schedule where that run left them: steps 3-4 must show the
# learning rate and epoch the uninterrupted run logged, exactly, and its losses (1e-5 relative: a
# CPU with other vector units may round differently; a wrong cursor or schedule moves them by far more).
source "$(dirname "$0")/e2e_lib.sh"
e2e_setup resume_old_checkpoint
OLD=$SRC/tests/train/data/checkpoint_b96bf18
mkdir -p run/ckpt && cp "$OLD/step_00000002.h5" run/ckpt/ && echo step_00000002.h5 > run/ckpt/latest
args=(-c "$SRC/configs/tiny.toml" --set data.train="$DATA/train.h5" --set data.valid="$DATA/valid.h5"
      --set data.val_n_samples=4 --set model.dim=16 --set model.n_layers=3 --set model.n_heads=2
      --set model.n_kv_heads=1 --set model.n_future_tokens=2 --set model.multiple_of=16 --set training.max_steps=4
      --set checkpoint.every=2 --set training.run_dir=run --set checkpoint.dir=run/ckpt --set logging.log_interval=1)
if $MPI -np 1 "$BIN/train-baseline" "${args[@]}" > run.log 2>&1; then ok "train-baseline resumed and finished"
else bad "train-baseline failed"; tail -20 run.log; fi
grep -q "resumed from run/ckpt/step_00000002.h5 at step 2" run.log && ok "resumed at step 2" || bad "did not resume at step 2"
grep -q "different sample selection\|no longer map" run.log && bad "resume warned: $(grep -m1 warn run.log)" \
  || ok "no warning: the data cursor and batch geometry match"
python3 - "$OLD/expected.txt" run/metrics.jsonl <<'PY' && ok "steps 3-4: lr and epoch exact, losses within 1e-5" || bad "steps 3-4 differ"
import json, sys
want = {int(l.split()[0]): [float(x) for x in l.split()[1:]] for l in open(sys.argv[1]) if not l.startswith("#")}
got = {}
for line in open(sys.argv[2]):
    r = json.loads(line)
    if "train/loss" in r: got[r["step"]] = [r["train/loss"], r["train/learning_rate"], r["train/epoch"]]
bad = 0
for s, (loss, lr, epoch) in sorted(want.items()):
    g = got.get(s)
    print(f"step {s}: loss {g and g[0]!r} (recorded {loss!r}), lr {g and g[1]!r} ({lr!r}), epoch {g and g[2]!r} ({epoch!r})")
    if g is None or g[1] != lr or g[2] != epoch or abs(g[0] - loss) > 1e-5 * abs(loss): bad += 1
sys.exit(1 if bad or sorted(got) != [3, 4] else 0)
PY
e2e_finish
