#!/usr/bin/env bash
# One device call for the third blind round (workloads written before zym saw them: diffusion,
# kvcache, embedsvc; bench/whatif/workloads/): every variant measured (harness.py measure, 15
# rounds, interleaved in one process), then a torch.profiler trace (stacks and shapes) of each
# baseline. Results: bench/whatif/results/h200-blind3/. Run from the repository root; no carry.
DEADLINE=${DEADLINE:-560}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
for w in ${WORKLOADS:-diffusion kvcache embedsvc}; do
    run 130 $H "$w" measure "$OUT/$w.measure.json" --rounds 15
done
for w in ${WORKLOADS:-diffusion kvcache embedsvc}; do
    run 80 $H "$w" trace "$OUT/$w.trace.json" --passes 1 && gzip -1 "$OUT/$w.trace.json"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
