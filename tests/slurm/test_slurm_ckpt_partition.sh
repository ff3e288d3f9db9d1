#!/usr/bin/env bash
# A partition during a checkpoint write: host2's link goes down while the step-4 checkpoint is being
# written (inside HDF5's MPI-IO), otherwise as test_slurm_lost_node.sh, which this runs with FAULT=ckpt.
FAULT=ckpt exec bash "$(dirname "$0")/test_slurm_lost_node.sh" "$@"
