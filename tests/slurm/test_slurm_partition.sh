#!/usr/bin/env bash
# A partition: host2's link goes down mid-step (packets dropped, no reset), otherwise as
# test_slurm_lost_node.sh, which this runs with FAULT=link.
FAULT=link exec bash "$(dirname "$0")/test_slurm_lost_node.sh" "$@"
