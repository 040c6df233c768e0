#!/usr/bin/env bash
# The body of a blind round's device call (workloads written before zym saw them;
# bench/whatif/workloads/), sourced by device_blindN.sh after it sets EQUIV (the round's
# equivalence check), WORKLOADS, and optionally EQUIV_S and MEASURE_S: each variant checked
# against the baseline on one request, every variant measured (harness.py measure, ROUNDS
# rounds interleaved in one process, each workload's measure cut at MEASURE_S seconds), then a
# torch.profiler trace (stacks and shapes) of each baseline, gzipped. Run from the repository
# root; no carry.
DEADLINE=${DEADLINE:-460}
RUN_TAIL=8
source bench/whatif/device_preamble.sh
RUN_TAIL=30 run "${EQUIV_S:-60}" python3 "$EQUIV" --device cuda
for w in $WORKLOADS; do
    run "${MEASURE_S:-150}" $H "$w" measure "$OUT/$w.measure.json" --rounds "${ROUNDS:-15}"
done
for w in $WORKLOADS; do
    run 60 $H "$w" trace "$OUT/$w.trace.json" --passes 1 && gzip -1 "$OUT/$w.trace.json"
done
ls -la "$OUT"
echo "total ${SECONDS}s"
