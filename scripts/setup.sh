#!/usr/bin/env bash
# Installs the Debian packages wmtp needs (with --test, those of the tests as well), then checks the
# machine can actually run it fast: optimized BLAS (Debian's reference BLAS makes fp32 matmul ~40x
# slower) and a 2-rank mpirun; --venv makes the tests' Python environment (below).
# Idempotent: a second run installs nothing and only re-checks.
set -euo pipefail

# What building and running the programs needs (`make demo`): the packages a new user waits for.
PACKAGES=(
  build-essential cmake ninja-build lld pkg-config ccache python3 procps
  libtorch-dev
  libopenblas0-pthread
  openmpi-bin libopenmpi-dev
  libhdf5-openmpi-dev hdf5-tools
  libtomlplusplus-dev
  libboost-program-options-dev
  libsentencepiece-dev sentencepiece
  libcurl4-openssl-dev
  gnuplot-nox
)
# What only the tests need (`make test`, `make check`): GoogleTest, the Slurm cluster of the `slurm`
# tests (scripts/slurm/cluster.sh starts its own daemons; installing them starts none we rely on),
# network namespaces for the test hosts, and what the virtual environment below is made with
# (python3-dev: the bench's torch.compile peer builds C++), and clang-format (test_format:
# scripts/check-format.sh; Debian 12's is version 14, the one .clang-format is written for).
TEST_PACKAGES=(
  libgtest-dev iproute2 clang-format
  slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins
  python3-venv python3-dev
)

# --test: the packages of the tests too. --venv: PyTorch 2.x and the Python peers in .venv-torch (no
# apt; `make test` makes it while the first leg compiles). --torch2: both (what `make check` needs).
WANT_TESTS=0 WANT_VENV=0 WANT_APT=1
case "${1:-}" in
  --test) WANT_TESTS=1 ;;
  --venv) WANT_VENV=1 WANT_APT=0 ;;
  --torch2) WANT_TESTS=1 WANT_VENV=1 ;;
  "") ;;
  *) echo "usage: $0 [--test | --venv | --torch2]" >&2; exit 2 ;;
esac
[ "$WANT_TESTS" = 1 ] && PACKAGES+=("${TEST_PACKAGES[@]}")

fail() { echo "setup: ERROR: $*" >&2; exit 1; }

if [ "$WANT_APT" = 1 ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done

  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
  else
    echo "setup: all ${#PACKAGES[@]} packages present"
  fi


  # --- BLAS: LibTorch (Debian) calls the system libblas.so.3; make it OpenBLAS, not the reference one.
  blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
  case "$blas" in
    *openblas*) ;;
    *)
      cand=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep openblas-pthread | head -1 || true)
      [ -n "$cand" ] || fail "libblas.so.3 resolves to '${blas:-nothing}' (Debian's reference BLAS: fp32 matmul ~40x slower) and no OpenBLAS alternative is installed; apt-get install libopenblas0-pthread"
      $SUDO update-alternatives --set libblas.so.3-x86_64-linux-gnu "$cand"
      lap=$(update-alternatives --list liblapack.so.3-x86_64-linux-gnu 2>/dev/null | grep openblas-pthread | head -1 || true)
      [ -n "$lap" ] && $SUDO update-alternatives --set liblapack.so.3-x86_64-linux-gnu "$lap"
      blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)
      case "$blas" in *openblas*) ;; *) fail "libblas.so.3 still resolves to $blas after update-alternatives";; esac
      ;;
  esac
  echo "setup: BLAS = $blas"

  # --- HDF5 must be the parallel (MPI-IO) build.
  h5pcc=$(command -v h5pcc || true)
  [ -n "$h5pcc" ] || [ -f /usr/include/hdf5/openmpi/hdf5.h ] || fail "parallel HDF5 headers not found (libhdf5-openmpi-dev)"
  grep -q "define H5_HAVE_PARALLEL 1" /usr/include/hdf5/openmpi/H5pubconf.h || fail "HDF5 in /usr/include/hdf5/openmpi is not built with parallel I/O"

  # --- mpirun must start 2 ranks on this machine.
  MPIFLAGS="--oversubscribe"
  [ "$(id -u)" -eq 0 ] && MPIFLAGS="$MPIFLAGS --allow-run-as-root"
  out=$(timeout 60 mpirun $MPIFLAGS -np 2 hostname 2>&1) || fail "'mpirun -np 2 hostname' failed: $out"
  [ "$(echo "$out" | wc -l)" -ge 2 ] || fail "'mpirun -np 2' started fewer than 2 ranks: $out"
  echo "setup: mpirun starts 2 ranks"

  # --- Slurm's PMIx plugin: `srun --mpi=pmix` is how the job scripts in sbatch/ start ranks.
  if [ "$WANT_TESTS" = 1 ]; then
    ls /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix*.so > /dev/null 2>&1 \
      || fail "Slurm's mpi_pmix plugin is missing (/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so, package slurm-wlm-basic-plugins)"
    echo "setup: Slurm $(dpkg-query -W -f='${Version}' slurmd) with the PMIx plugin"
  fi
fi
# --- PyTorch 2.x and the Python peers (--venv, --torch2): a virtual environment in the checkout
# (ignored by git), reinstalled only when the pins change (a stamp holds the pin files' checksum).
# 6.4 GB, ~4 minutes from PyPI on a fresh machine.
if [ "$WANT_VENV" = 1 ]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  venv=${WMTP_VENV:-$root/.venv-torch}
  pins=$(cat "$root/scripts/requirements-torch2.txt" "$root/scripts/requirements-torch2.lock" | sha256sum | cut -c1-16)
  if [ "$(cat "$venv/.wmtp-pins" 2>/dev/null)" != "$pins" ]; then
    echo "setup: installing PyTorch 2.x and the test peers into $venv (scripts/requirements-torch2.txt)"
    [ -x "$venv/bin/python3" ] || python3 -m venv "$venv" || fail "python3 -m venv $venv failed (apt-get install python3-venv)"
    "$venv/bin/python3" -m pip install -q --disable-pip-version-check \
      -r "$root/scripts/requirements-torch2.txt" -c "$root/scripts/requirements-torch2.lock" \
      || fail "pip could not install scripts/requirements-torch2.txt into $venv"
    echo "$pins" > "$venv/.wmtp-pins"
  fi
  "$venv/bin/python3" -c 'import torch, mlflow, tensorboard, transformers, peft' \
    || fail "$venv lacks a pinned package: remove $venv/.wmtp-pins and run again"
  echo "setup: $("$venv/bin/python3" -c 'import torch; print("PyTorch", torch.__version__, "(CUDA", torch.version.cuda, end=")")') in $venv"
fi
echo "setup: ok"
