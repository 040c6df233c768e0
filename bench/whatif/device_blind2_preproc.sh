#!/usr/bin/env bash
# One device call: preproc (the first blind round's tokenizing service) measured with its
# pretokenized variant, added after utilization.cpu-bound-step was written, to measure what
# that rule's estimate bounds (harness.py measure, 15 rounds interleaved in one process), and
# a torch.profiler trace (stacks and shapes) of its baseline on the same machine.
# Results: bench/whatif/results/h100-blind2/. Run from the repository root; no carry.
DEADLINE=${DEADLINE:-300}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
run 150 $H preproc measure "$OUT/preproc.measure.json" --rounds 15
run 90 $H preproc trace "$OUT/preproc.trace.json" --passes 1 && gzip -9 "$OUT/preproc.trace.json"
ls -la "$OUT"
echo "total ${SECONDS}s"
