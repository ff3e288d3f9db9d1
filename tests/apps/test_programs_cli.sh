#!/usr/bin/env bash
# Every program answers --help with exit 0; config errors exit 2 naming the key or file:line, alone
# and under mpirun; --print-config parses back to the same config and prints no credentials.
set -u
BIN=${WMTP_BIN_DIR:?}; TMP=${WMTP_TEST_TMP_DIR:?}/programs_cli; rm -rf "$TMP"; mkdir -p "$TMP"
source "${WMTP_SOURCE_DIR:?}/tests/support/checks.sh"
check() {  # check NAME EXPECTED_RC PATTERN -- command...
  local name=$1 want=$2 pattern=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ]; then bad "$name: exit $rc, want $want"; echo "$out" | head -20; return; fi
  if [ -n "$pattern" ] && ! grep -qE -- "$pattern" <<<"$out"; then
    bad "$name: output lacks /$pattern/"; echo "$out" | head -20; return; fi
  ok "$name"
}

# The programs the build made, one per apps/*.cpp (set by tests/apps/CMakeLists.txt): each answers
# --help, and README.md's table of programs has a row for each and no row for anything else.
PROGRAMS=${WMTP_PROGRAMS:?set by ctest: the programs apps/CMakeLists.txt built}
for p in $PROGRAMS; do
  check "$p --help" 0 "Example" -- "$BIN/$p" --help
done
readme_rows=$(grep -oE '^\| `[a-z][a-z0-9-]*` \|' "${WMTP_SOURCE_DIR:?}/README.md" | tr -d '|` ' | sort)
built=$(tr ' ' '\n' <<<"$PROGRAMS" | grep . | sort)
if [ "$readme_rows" = "$built" ]; then ok "README.md's table lists exactly the programs built"
else
  bad "README.md's table of programs vs the programs built (< README only, > built only):"
  diff <(echo "$readme_rows") <(echo "$built") | grep '^[<>]'
fi
check "unknown option" 2 "unrecognised option '--bogus'" -- "$BIN/train-baseline" --bogus

printf '[training]\nmicro_batch_sise = 4\n' > "$TMP/unknown.toml"
check "unknown key" 2 "micro_batch_sise.*did you mean 'micro_batch_size'" -- "$BIN/train-baseline" -c "$TMP/unknown.toml" --print-config
printf '[training]\nglobal_batch_size = "lots"\n' > "$TMP/type.toml"
check "wrong type" 2 "training.global_batch_size expects an integer" -- "$BIN/train-rho1" -c "$TMP/type.toml" --print-config
printf '[training]\nn_epochs = 1.0\nseed = = 3\n' > "$TMP/syntax.toml"
check "syntax error" 2 "$TMP/syntax.toml:3" -- "$BIN/train-critic" -c "$TMP/syntax.toml" --print-config
check "unknown section" 2 "unknown section \[trianing\]" -- "$BIN/train-baseline" --set trianing.seed=1 --print-config
check "bad --set" 2 "training.seed=abc.*as an integer" -- "$BIN/train-verifiable" --set training.seed=abc --print-config
check "critic with its own optimizer groups" 2 "\[optimizer\] group_patterns: train-critic sets the parameter groups" -- \
  "$BIN/train-critic" --set 'optimizer.group_patterns=["*norm*"]' --set 'optimizer.group_lr=[1e-3]' --set 'optimizer.group_weight_decay=[0.0]'
check "critic without data" 2 "\[data\] train: no training dataset given" -- "$BIN/train-critic" --set training.seed=1
check "rho1 without a reference" 2 "\[rho1\] reference: no reference model given" -- "$BIN/train-rho1" --set training.seed=1
check "missing config" 2 "cannot open config file" -- "$BIN/train-baseline" -c "$TMP/none.toml"

# Values of the right type that no run can use: refused before any work, naming the key.
check "lr = inf" 2 "optimizer.lr = inf: expected a finite number" -- "$BIN/train-baseline" --set optimizer.lr=inf
printf '[optimizer]\nmax_grad_norm = nan\n' > "$TMP/nan.toml"
check "max_grad_norm = nan" 2 "nan.toml:2:.*max_grad_norm = nan: expected a finite number" -- "$BIN/train-baseline" -c "$TMP/nan.toml"
check "lr = 1e38 (overflows fp32 in the update)" 2 "optimizer\] lr = 1e\+38: the AdamW step" -- "$BIN/train-baseline" --set optimizer.lr=1e38
# Finite numbers whose float32 image overflows (or vanishes): refused for every float key by the config itself.
check "critic.value_head_bias_init = 1e300" 2 "critic.value_head_bias_init = 1e\+300 is out of range: .*float32" -- \
  "$BIN/train-critic" --set critic.value_head_bias_init=1e300
check "critic.coef = 1e308" 2 "critic.coef = 1e\+308 is out of range: .*float32" -- "$BIN/train-critic" --set critic.coef=1e308
check "max_steps = -1" 2 "\[training\] max_steps = -1: expected >= 0" -- "$BIN/train-baseline" --set training.max_steps=-1
check "n_epochs = -1" 2 "\[training\] n_epochs = -1: expected > 0" -- "$BIN/train-baseline" --set training.n_epochs=-1
check "n_epochs = -1 (dry run)" 2 "n_epochs = -1" -- "$BIN/train-baseline" --set training.n_epochs=-1 --dry-run
check "--world-size -3" 2 "--world-size -3: expected a number of ranks >= 1" -- "$BIN/train-baseline" --dry-run --world-size -3
check "--world-size without --dry-run" 2 "only plans with --dry-run" -- "$BIN/train-baseline" --world-size 4
check "-c DIRECTORY" 2 "config file '$TMP' is a directory" -- "$BIN/train-baseline" -c "$TMP"

# Launch mistakes are usage errors too (exit 2, not a runtime failure): a launcher's variables the
# program cannot read (checked before MPI starts), and a launcher that started more tasks than the
# MPI world holds (checked after MPI starts: here MPICH-style PMI variables around Open MPI, which
# runs a world of one; under srun it is `--mpi=none`, tested with Slurm in test_slurm_train).
check "launcher variable not a number" 2 "SLURM_PROCID='x' is not a non-negative integer" -- \
  env SLURM_STEP_ID=0 SLURM_PROCID=x "$BIN/train-baseline" --print-config
check "launcher and MPI world disagree" 2 "pmi started 2 task\(s\) but MPI sees a world of 1" -- \
  env PMI_RANK=0 PMI_SIZE=2 "$BIN/train-baseline" --print-config

# Output paths that cannot work are usage errors found before any input is read (exit 2, nothing left).
mkdir -p "$TMP/isdir.h5"; echo file > "$TMP/afile"
check "merge-lora --output DIRECTORY.h5" 2 "--output '$TMP/isdir.h5' is a directory" -- \
  "$BIN/merge-lora" --base "$TMP/none.h5" --output "$TMP/isdir.h5"
check "merge-lora --output under a file" 2 "'$TMP/afile' is a file, not a directory" -- \
  "$BIN/merge-lora" --base "$TMP/none.h5" --output "$TMP/afile/merged"
check "import --output DIRECTORY" 2 "--output '$TMP/isdir.h5' is a directory" -- \
  "$BIN/convert-checkpoint" import --from hf --input "$TMP/none" --output "$TMP/isdir.h5"
check "export --output under a file" 2 "'$TMP/afile' is a file, not a directory" -- \
  "$BIN/convert-checkpoint" export --input "$TMP/none.h5" --output "$TMP/afile/out"
ls "$TMP"/*.tmp "$TMP"/isdir.h5/* > /dev/null 2>&1 && { bad "output checks left files behind"; }

# Under mpirun every rank hits the same config error: one message, exit 2, no abort.
MPI="${MPIEXEC:-mpirun} ${MPIEXEC_FLAGS:-} -np 2"
out=$($MPI "$BIN/train-baseline" -c "$TMP/unknown.toml" 2>&1); rc=$?
if [ "$rc" = 2 ] && [ "$(grep -c 'micro_batch_sise' <<<"$out")" = 1 ]; then ok "mpirun config error"; else
  bad "mpirun config error: exit $rc"; echo "$out" | head; fi

# --print-config round trip, with overrides of several types.
"$BIN/train-baseline" --set training.seed=7 --set lr_schedule.type=linear --set training.run_dir="runs/a b" \
  --print-config > "$TMP/printed.toml" || { bad "print-config"; }
"$BIN/train-baseline" -c "$TMP/printed.toml" --print-config > "$TMP/printed2.toml"
if cmp -s "$TMP/printed.toml" "$TMP/printed2.toml" && grep -q 'seed = 7' "$TMP/printed.toml"; then
  ok "print-config round trip"; else bad "print-config round trip"; diff "$TMP/printed.toml" "$TMP/printed2.toml"; fi

# --print-config prints no credentials: a logging.mlflow_uri with a password (which a run refuses)
# is printed with its userinfo redacted, as the refusal's message prints it.
out=$("$BIN/train-baseline" --set logging.mlflow_uri=http://alice:s3cret@mlflow.example:5000 --print-config 2>&1); rc=$?
if [ "$rc" = 0 ] && ! grep -q 's3cret\|alice' <<<"$out" && grep -qE "^mlflow_uri = [\"']http://[*]{3}@mlflow.example:5000[\"']$" <<<"$out"; then
  ok "print-config redacts logging.mlflow_uri's credentials"
else bad "print-config with a password in logging.mlflow_uri: exit $rc"; grep mlflow_uri <<<"$out"; fi

checks_finish
