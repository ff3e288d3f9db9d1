#!/usr/bin/env bash
# Installs every Debian package wmtp needs, then checks the machine can actually run it fast:
# optimised BLAS (Debian's reference BLAS makes fp32 matmul ~40x slower) and a 2-rank mpirun.
# Slurm and munge are for the `slurm` tests, which start their own throwaway cluster
# (scripts/slurm/cluster.sh); installing them starts no daemon we rely on.
# Idempotent: a second run installs nothing and only re-checks.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config ccache python3 procps iproute2
  libtorch-dev
  libopenblas0-pthread
  openmpi-bin libopenmpi-dev
  libhdf5-openmpi-dev hdf5-tools
  libtomlplusplus-dev
  libboost-program-options-dev
  libgtest-dev
  libsentencepiece-dev sentencepiece
  libcurl4-openssl-dev
  gnuplot-nox
  slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins
)

# `setup.sh --torch2` (make test, check, bench) also makes .venv-torch: PyTorch 2.x (its LibTorch, with CUDA, is
# what the second test leg builds against) and the real MLflow / TensorBoard / transformers / PEFT
# the tests read back with, pinned in scripts/requirements-torch2.{txt,lock}.
WANT_TORCH2=0
case "${1:-}" in
  --torch2) WANT_TORCH2=1; PACKAGES+=(python3-venv python3-dev) ;;  # python3-dev: torch.compile builds C++
  "") ;;
  *) echo "usage: $0 [--torch2]" >&2; exit 2 ;;
esac

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

fail() { echo "setup: ERROR: $*" >&2; exit 1; }

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
ls /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix*.so > /dev/null 2>&1 \
  || fail "Slurm's mpi_pmix plugin is missing (/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so, package slurm-wlm-basic-plugins)"
echo "setup: Slurm $(dpkg-query -W -f='${Version}' slurmd) with the PMIx plugin"
# --- PyTorch 2.x and the Python peers (--torch2): a virtual environment in the checkout (ignored by
# git), reinstalled only when the pins change (a stamp holds the pin files' checksum). 6.4 GB,
# ~4 minutes from PyPI on a fresh machine.
if [ "$WANT_TORCH2" = 1 ]; then
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
