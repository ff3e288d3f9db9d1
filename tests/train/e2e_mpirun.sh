#!/usr/bin/env bash
# The e2e scripts' mpirun ($MPI, set by e2e_lib.sh): e2e_mpirun of e2e_lib.sh as a command, so that
# whatever runs it (a subshell, scripts/launch.sh through MPIRUN) gets the same launcher and devices.
source "$(dirname "${BASH_SOURCE[0]}")/e2e_lib.sh"
e2e_mpirun "$@"
