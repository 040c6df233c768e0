#!/usr/bin/env bash
# One device call for the fourth blind round (workloads written before zym saw them: segserve,
# gnnserve, ttsvoc; bench/whatif/workloads/): each variant checked against the baseline on one
# request (bench/whatif/blind4_equiv.py), every variant measured (harness.py measure, 15
# rounds interleaved in one process), a torch.profiler trace (stacks and shapes) of each
# baseline. Results: $OUT
# (kept in bench/whatif/results/h100-blind4/ or h200-blind4/, the card lent). Run from the
# repository root; no carry.
DEADLINE=${DEADLINE:-560}
RUN_TAIL=12
source bench/whatif/device_preamble.sh
run 100 python3 bench/whatif/blind4_equiv.py --device cuda | tee "$OUT/equiv.txt"
for w in ${WORKLOADS:-segserve gnnserve ttsvoc}; do
    run 150 $H "$w" measure "$OUT/$w.measure.json" --rounds 15
done
for w in ${WORKLOADS:-segserve gnnserve ttsvoc}; do
    run 90 $H "$w" trace "$OUT/$w.trace.json" --passes 1 && gzip -1 "$OUT/$w.trace.json"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
