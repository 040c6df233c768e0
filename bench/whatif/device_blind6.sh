#!/usr/bin/env bash
# One device call for the sixth blind round (workloads written before zym saw them: ctseg,
# cliptag, mottrack; bench/whatif/workloads/): each variant checked against the baseline on one
# request (bench/whatif/blind6_equiv.py, $OUT/equiv.txt), then the second round's script over
# these workloads (every variant measured, harness.py measure, 15 rounds interleaved in one
# process, then a torch.profiler trace, stacks and shapes, of each baseline). Run from the
# repository root; no carry.
export PYTHONUNBUFFERED=1
timeout 100 python3 bench/whatif/blind6_equiv.py --device cuda 2>&1 | tail -20 \
    | tee "$OUT/equiv.txt"
WORKLOADS=${WORKLOADS:-ctseg cliptag mottrack} DEADLINE=${DEADLINE:-460} \
    exec bash bench/whatif/device_blind2.sh
