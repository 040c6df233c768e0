#!/usr/bin/env bash
# One device call for the third blind round (workloads written before zym saw them: diffusion,
# kvcache, embedsvc; bench/whatif/workloads/): the second round's script over these workloads
# (every variant measured, harness.py measure, 15 rounds interleaved in one process, then a
# torch.profiler trace, stacks and shapes, of each baseline). Results:
# bench/whatif/results/h100-blind3/ (the card lent). Run from the repository root; no carry.
# (Measured with this script's first form, the same stages with limits of 130 s and 80 s.)
WORKLOADS=${WORKLOADS:-diffusion kvcache embedsvc} exec bash bench/whatif/device_blind2.sh
